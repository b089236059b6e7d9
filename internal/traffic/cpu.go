package traffic

import (
	"syscall"
	"time"
)

// ProcessCPU is the process's user and system CPU time so far, all
// threads (getrusage), or 0 if it cannot tell: what a measurement that
// runs both ends in one process spent, beside the wall clock.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
