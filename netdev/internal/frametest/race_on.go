//go:build race

package frametest

// RaceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are not checked under it.
const RaceEnabled = true
