package rvt

// Deterministic simulation (DESIGN.md, Testing): 2-4 devices on the
// in-memory fabric under one manual clock, with a seeded fault profile on
// every link, run a random workload of RC, UC and UD QP pairs; invariants
// are checked at the end. Every task runs inline on the test goroutine and
// timers fire only when the run loop advances the clock, so a seed replays
// exactly:
//
//	go test ./rvt -run '^TestSim$/^seed=1234$' -v
//
// SIM_SEEDS sets how many seeds TestSim runs (default 300), SIM_SEED_START
// the first one (default 1), and SIM_SEED runs exactly one seed.
//
// The workload (sim_workload_test.go): per pair a random list of SEND (with
// and without immediate), RDMA WRITE (with and without immediate), RDMA
// READ, FETCH_ADD and CMP_SWP for RC; SEND and WRITE for UC; SEND for UD.
// Sizes run from 0 to 1 MiB, mostly small; scattered SGEs with gaps; inline
// data; fences; unsignalled WRs; path MTUs 256-4096; PSNs near the 24-bit
// wrap; receive WQEs posted late (RNR NAKs); WRs posted in several calls
// spread over virtual time.
//
// The invariants (sim_check_test.go): for RC, every signalled WR completes
// once, in order, successfully; receives complete in order with the right
// length, opcode and immediate; every byte of every buffer (sources, receive
// buffers with their slack and the gaps between SGEs, WRITE targets, READ
// destinations, atomic words and results) ends exactly as computed in
// advance; no QP leaves RTS; nothing hangs within the virtual-time budget.
// For UC and UD, what arrives is intact, and in order and at most once when
// the profile neither duplicates nor reorders; with no faults everything
// arrives.

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func simEnvInt(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestSim(t *testing.T) {
	first := simEnvInt(t, "SIM_SEED_START", 1)
	n := simEnvInt(t, "SIM_SEEDS", 300)
	if v := os.Getenv("SIM_SEED"); v != "" {
		first, n = simEnvInt(t, "SIM_SEED", 0), 1
	}
	if testing.Short() {
		n = min(n, 30)
	}
	start := time.Now()
	t.Cleanup(func() { t.Logf("%d seeds from %d in %v", n, first, time.Since(start)) })
	for seed := first; seed < first+n; seed++ {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			t0 := time.Now()
			res := runSim(seed, simWallBudget)
			if len(res.errs) > 0 {
				msg := ""
				for _, e := range res.errs {
					msg += "\n  " + e
				}
				t.Fatalf("seed %d, profile %s (%s) failed:%s\nreplay: go test ./rvt -run '^TestSim$/^seed=%d$' -v",
					seed, res.profile, res.summary, msg, seed)
			}
			if testing.Verbose() {
				t.Logf("profile %s: %s, %v", res.profile, res.summary, time.Since(t0))
			}
		})
	}
}

// TestSimDeterminism runs seeds of every profile twice and requires
// bit-identical outcomes: completions and the virtual times they were
// polled at, counters, QP state, final memory and the clock.
func TestSimDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= uint64(2*len(simProfiles)); seed++ {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			a, b := runSim(seed, time.Minute), runSim(seed, time.Minute)
			if a.digest != b.digest || a.summary != b.summary {
				t.Fatalf("seed %d (profile %s) is not deterministic: %x (%s) vs %x (%s)\nreplay: go test ./rvt -run '^TestSimDeterminism$/^seed=%d$' -v",
					seed, a.profile, a.digest[:8], a.summary, b.digest[:8], b.summary, seed)
			}
		})
	}
}
