//go:build !race

package rvt

const raceEnabled = false
