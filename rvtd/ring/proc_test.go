package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// Two processes share a QP's rings the way rvtd and a client will: the
// test (the daemon's role) creates a memfd with a send ring and a CQ ring
// and an eventfd doorbell, and passes them in a create_qp reply over a
// socketpair to a child (this test binary re-executed, the client's role).
// The child posts send WQEs; the parent consumes them, busy or sleeping
// on the doorbell, and answers each with a CQE the child polls.

const childEnv = "RVTD_RING_CHILD"

var (
	sqLayout = Layout{Offset: 0, Entries: 64, Stride: 128}
	cqLayout = Layout{Offset: 16384, Entries: 64, Stride: CQESize}
)

func TestTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		n     int
		sleep bool // the parent consumer sleeps on the doorbell when empty
	}{
		{"busy", 200000, false},
		{"sleeping", 3000, true},
		{"corrupt", 10, true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if tc.mode == "busy" && runtime.NumCPU() < 2 {
				t.Skip("a busy pair needs two CPUs")
			}
			runParent(t, tc.mode, tc.n, tc.sleep)
		})
	}
}

func runParent(t *testing.T, mode string, n int, sleep bool) {
	reg, err := Create("rvtd-qp", int(cqLayout.Offset+cqLayout.Size()))
	require.NoError(t, err)
	defer reg.Close()
	require.NoError(t, Init(reg.Bytes(), KindSend, sqLayout))
	require.NoError(t, Init(reg.Bytes(), KindCQ, cqLayout))
	db, err := NewDoorbell()
	require.NoError(t, err)
	defer db.Close()
	sq, err := NewConsumer(reg.Bytes(), KindSend, sqLayout, db, false)
	require.NoError(t, err)
	cq, err := NewProducer(reg.Bytes(), KindCQ, cqLayout, nil, false)
	require.NoError(t, err)

	mine, theirs, err := proto.RawPair()
	require.NoError(t, err)
	conn, err := proto.FileConn(mine)
	require.NoError(t, err)
	defer conn.Close()
	child := os.NewFile(uintptr(theirs), "child-socket")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRingChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "RVTD_RING_N="+strconv.Itoa(n))
	cmd.ExtraFiles = []*os.File{child} // fd 3
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	child.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	require.NoError(t, conn.Send(proto.Header{Op: proto.OpCreateQP, Flags: proto.FlagReply, ReqID: 1},
		&proto.QPReply{QP: 1, QPN: 17, MapSize: uint64(len(reg.Bytes())),
			SQ:    proto.RingLayout{Offset: sqLayout.Offset, Entries: sqLayout.Entries, Stride: sqLayout.Stride},
			RQ:    proto.RingLayout{Offset: cqLayout.Offset, Entries: cqLayout.Entries, Stride: cqLayout.Stride},
			MemFD: reg.FD(), Doorbell: db.FD()}))

	var wqe [128]byte
	seen, sleeps := 0, 0
	var corrupt error
	require.NoError(t, db.SetDeadline(time.Now().Add(30*time.Second)))
	for (seen < n || mode == "corrupt") && corrupt == nil {
		avail, err := sq.Available()
		if err == nil && avail == 0 {
			if !sleep {
				runtime.Gosched()
				continue
			}
			sleeps++
			avail, err = sq.Wait()
		}
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				corrupt = err
				sq.Fail(uint32(unix.EPROTO))
				break
			}
			require.NoError(t, err, "child output:\n%s", out.String())
		}
		for k := range avail {
			copy(wqe[:], sq.Slot(k)) // copy once, then look at the copy
			w := SendWQE(wqe[:])
			require.Equal(t, uint64(seen), w.WRID())
			for {
				free, err := cq.Free()
				require.NoError(t, err)
				if free > 0 {
					break
				}
				runtime.Gosched()
			}
			e := CQE(cq.Slot(0))
			e.SetWRID(w.WRID())
			e.SetStatus(0)
			e.SetByteLen(w.SGE(0).Length())
			e.SetQPNum(17)
			e.SetSolicited(false)
			_, err := cq.Publish(1)
			require.NoError(t, err)
			seen++
		}
		sq.Release(avail)
	}
	require.NoError(t, <-done, "child output:\n%s", out.String())
	t.Logf("%s: %d WQEs, parent slept %d times; child: %s", mode, seen, sleeps, bytes.TrimSpace(childLine(out.Bytes())))
	switch mode {
	case "corrupt":
		require.ErrorIs(t, corrupt, ErrCorrupt)
		require.Equal(t, uint32(unix.EPROTO), sq.Status())
	case "busy":
		require.Contains(t, out.String(), "rings=0 ", "a busy consumer is never rung")
	case "sleeping":
		require.NotContains(t, out.String(), "rings=0 ")
		require.Greater(t, sleeps, 0)
	}
}

func childLine(out []byte) []byte {
	for _, l := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("rings=")) {
			return l
		}
	}
	return nil
}

// TestRingChild is the client's side, run only in the re-executed child.
func TestRingChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("the child side of TestTwoProcesses")
	}
	n, _ := strconv.Atoi(os.Getenv("RVTD_RING_N"))
	if err := child(mode, n); err != nil {
		fmt.Println("child:", err)
		os.Exit(1)
	}
}

func child(mode string, n int) error {
	conn, err := proto.FileConn(3)
	if err != nil {
		return err
	}
	m, err := conn.Recv()
	if err != nil {
		return err
	}
	rep := m.Body.(*proto.QPReply)
	reg, err := Map(rep.MemFD, int(rep.MapSize), false)
	if err != nil {
		return err
	}
	db, err := OpenDoorbell(rep.Doorbell)
	if err != nil {
		return err
	}
	sqL := Layout{Offset: rep.SQ.Offset, Entries: rep.SQ.Entries, Stride: rep.SQ.Stride}
	cqL := Layout{Offset: rep.RQ.Offset, Entries: rep.RQ.Entries, Stride: rep.RQ.Stride}
	sq, err := NewProducer(reg.Bytes(), KindSend, sqL, db, true)
	if err != nil {
		return err
	}
	cq, err := NewConsumer(reg.Bytes(), KindCQ, cqL, nil, true)
	if err != nil {
		return err
	}
	posted, polled, rings := 0, 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for polled < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out: posted %d, polled %d", posted, polled)
		}
		free, err := sq.Free()
		if err != nil {
			return err
		}
		burst := min(free, n-posted)
		if mode == "sleeping" {
			burst = min(burst, 7)
		}
		for k := range burst {
			w := SendWQE(sq.Slot(k))
			w.SetWRID(uint64(posted + k))
			w.SetOpcode(2) // SEND
			w.SetSendFlags(2)
			w.SetNumSGE(1)
			w.SGE(0).Set(0x1000, uint32(posted+k), 0x100)
		}
		if burst > 0 {
			rang, err := sq.Publish(burst)
			if err != nil {
				return err
			}
			if rang {
				rings++
			}
			posted += burst
		}
		avail, err := cq.Available()
		if err != nil {
			return err
		}
		for k := range avail {
			e := CQE(cq.Slot(k))
			if e.WRID() != uint64(polled) || e.ByteLen() != uint32(polled) {
				return fmt.Errorf("CQE %d has wr_id %d", polled, e.WRID())
			}
			polled++
		}
		cq.Release(avail)
		if mode == "sleeping" && avail > 0 {
			time.Sleep(50 * time.Microsecond) // let the daemon side fall asleep
		}
		if mode == "corrupt" && polled == n {
			// Publish an index far past the consumer's, ring, and wait for
			// the daemon to stop serving the ring.
			sq.hdr.u32(offProducer).Store(uint32(posted) + 1000)
			if err := db.Ring(); err != nil {
				return err
			}
			for sq.Status() == 0 {
				if time.Now().After(deadline) {
					return errors.New("the daemon did not refuse the index")
				}
				time.Sleep(time.Millisecond)
			}
		}
		if avail == 0 {
			runtime.Gosched()
		}
	}
	fmt.Printf("rings=%d posted=%d polled=%d status=%d\n", rings, posted, polled, sq.Status())
	return nil
}
