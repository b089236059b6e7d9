//go:build !unix

package rvt

func processCPU() int64 { return -1 }
