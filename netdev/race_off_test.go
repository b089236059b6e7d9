//go:build !race

package netdev

const raceEnabled = false
