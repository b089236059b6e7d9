package rvtd_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
)

// TestPingPongNoLostWakeup bounces SENDs between two in-process client
// sessions, busy-polling, with the loops spinning and sleeping in turn:
// every message must arrive (a lost wake-up stalls the exchange).
func TestPingPongNoLostWakeup(t *testing.T) {
	iters := 3000
	if s := os.Getenv("RVTD_PINGPONG_ITERS"); s != "" {
		iters, _ = strconv.Atoi(s)
	}
	for _, spin := range []time.Duration{-1, 20 * time.Microsecond, time.Millisecond} {
		t.Run(fmt.Sprint(spin), func(t *testing.T) {
			sock := startDaemonOpts(t, rvtd.Options{Spin: spin})
			a, b := pair(t, sock, false, false)
			for _, n := range []*node{a, b} {
				for i := 0; i < 16; i++ {
					if err := n.qp.PostRecv(uint64(i), client.SGE{Addr: n.mr.Addr + uint64(i*64), Length: 64, LKey: n.mr.LKey}); err != nil {
						t.Fatal(err)
					}
				}
			}
			errc := make(chan error, 2)
			run := func(n *node, ping bool) {
				buf := make([]client.WC, 16)
				recvs := 0
				for i := 0; i < iters; i++ {
					if ping {
						if err := n.qp.PostSend(client.SendWR{Opcode: 2, Flags: 2,
							SGL: []client.SGE{{Addr: n.mr.Addr + 4096, Length: 8, LKey: n.mr.LKey}}}); err != nil {
							errc <- err
							return
						}
					}
					deadline := time.Now().Add(5 * time.Second)
					for recvs == 0 {
						k, err := n.cq.Poll(buf)
						if err != nil {
							errc <- err
							return
						}
						for _, wc := range buf[:k] {
							if wc.Status != 0 {
								errc <- fmt.Errorf("completion %+v", wc)
								return
							}
							if wc.Opcode >= 128 {
								recvs++
							}
						}
						if k == 0 {
							// Not runtime.Gosched: goroutines forever back in
							// the run queue keep Go's netpoller from the
							// daemon's parked goroutines.
							time.Sleep(5 * time.Microsecond)
						}
						if time.Now().After(deadline) {
							h := n.qp.SendRingHeader()
							r := n.qp.RecvRingHeader()
							errc <- fmt.Errorf("ping %v: iteration %d: no message for 5 s; send ring p=%d c=%d flags=%d, recv ring p=%d c=%d flags=%d",
								ping, i, binary.LittleEndian.Uint32(h), binary.LittleEndian.Uint32(h[64:]), binary.LittleEndian.Uint32(h[128:]),
								binary.LittleEndian.Uint32(r), binary.LittleEndian.Uint32(r[64:]), binary.LittleEndian.Uint32(r[128:]))
							return
						}
					}
					recvs--
					if err := n.qp.PostRecv(uint64(i%16), client.SGE{Addr: n.mr.Addr + uint64(i%16*64), Length: 64, LKey: n.mr.LKey}); err != nil {
						errc <- err
						return
					}
					if !ping {
						if err := n.qp.PostSend(client.SendWR{Opcode: 2, Flags: 2,
							SGL: []client.SGE{{Addr: n.mr.Addr + 4096, Length: 8, LKey: n.mr.LKey}}}); err != nil {
							errc <- err
							return
						}
					}
					if i%500 == 499 {
						time.Sleep(2 * time.Millisecond) // let the loops fall asleep
					}
				}
				errc <- nil
			}
			go run(a, true)
			go run(b, false)
			for range 2 {
				if err := <-errc; err != nil {
					t.Error(err)
				}
			}
		})
	}
}
