package rearm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// TestArmOnce checks Timer's rule: at most one call is
// pending, the armed flag is clear when f runs, and an arm from inside f
// schedules another call.
func TestArmOnce(t *testing.T) {
	for _, resettable := range []bool{false, true} {
		name := map[bool]string{false: "AfterFunc", true: "Reset"}[resettable]
		t.Run(name, func(t *testing.T) {
			c := &frametest.StubClock{Resettable: resettable}
			var r Timer
			calls, rearm, armedInF := 0, false, false
			r.Init(c, func() {
				calls++
				armedInF = armedInF || r.Armed()
				if rearm {
					rearm = false
					require.True(t, r.ArmOnce(time.Millisecond), "an arm from inside f")
				}
			})
			require.False(t, c.Fire(), "init leaves the timer stopped")

			arm := func() bool { return r.ArmOnce(time.Millisecond) }
			armRearming := func() bool { rearm = true; return arm() }
			steps := []struct {
				name      string
				do        func() bool
				want      bool // what do returns
				wantCalls int
				wantArmed bool
			}{
				{name: "arm", do: arm, want: true, wantArmed: true},
				{name: "arm while pending", do: arm, want: false, wantArmed: true},
				{name: "fire", do: c.Fire, want: true, wantCalls: 1},
				{name: "nothing left to fire", do: c.Fire, want: false, wantCalls: 1},
				{name: "arm, f will arm", do: armRearming, want: true, wantCalls: 1, wantArmed: true},
				{name: "fire, f arms", do: c.Fire, want: true, wantCalls: 2, wantArmed: true},
				{name: "fire f's arm", do: c.Fire, want: true, wantCalls: 3},
				{name: "then nothing", do: c.Fire, want: false, wantCalls: 3},
			}
			for _, s := range steps {
				require.Equal(t, s.want, s.do(), s.name)
				require.Equal(t, s.wantCalls, calls, s.name)
				require.Equal(t, s.wantArmed, r.Armed(), s.name)
			}
			require.False(t, armedInF, "the flag is cleared before f runs")
		})
	}
}
