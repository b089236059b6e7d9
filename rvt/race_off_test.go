//go:build !race

package rvt

const raceEnabled = false

// raceSlowdown scales wall-clock budgets: code under the race detector
// runs several times slower.
const raceSlowdown = 1
