//go:build !race

package frametest

const RaceEnabled = false
