package traffic

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/rvt"
)

// ErrTimeout is returned when completions do not arrive in time.
var ErrTimeout = errors.New("timed out waiting for completions")

// WaitTimeout bounds every wait for a completion of Wait, and the wait
// for the last completions after a timed run.
const WaitTimeout = 5 * time.Second

// Wait polls c until n completions arrived or WaitTimeout passed.
func Wait(c *rvt.CQ, n int) ([]rvt.WC, error) {
	return WaitFor(c, n, WaitTimeout)
}

// WaitFor polls c until n completions arrived or d passed; on timeout it
// returns what arrived and ErrTimeout (wrapped).
func WaitFor(c *rvt.CQ, n int, d time.Duration) ([]rvt.WC, error) {
	out := make([]rvt.WC, 0, n)
	buf := make([]rvt.WC, 16)
	deadline := time.Now().Add(d)
	for idle := 0; len(out) < n; {
		k := c.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k > 0 {
			idle = 0
			continue
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%w: got %d of %d", ErrTimeout, len(out), n)
		}
		idle++
		Backoff(idle)
	}
	return out, nil
}

// WaitOK waits for n completions and checks that all succeeded.
func WaitOK(c *rvt.CQ, n int) error {
	wcs, err := Wait(c, n)
	if err != nil {
		return err
	}
	for _, wc := range wcs {
		if wc.Status != cq.Success {
			return fmt.Errorf("wr_id %d: %v", wc.WRID, wc.Status)
		}
	}
	return nil
}

// Backoff yields to the device's workers while a poll loop finds nothing
// (idle counts the empty polls in a row).
func Backoff(idle int) {
	if idle < 64 {
		runtime.Gosched()
		return
	}
	time.Sleep(20 * time.Microsecond)
}
