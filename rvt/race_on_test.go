//go:build race

package rvt

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are not checked under it.
const raceEnabled = true

// raceSlowdown scales wall-clock budgets: code under the race detector
// runs several times slower.
const raceSlowdown = 10
