package rvtd_test

import (
	"encoding/hex"
	"math/rand"
	"net/netip"
	"runtime/pprof"

	"github.com/softverbs/softverbs/rvtd"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// FuzzSession sends random requests on a session that has a device, a PD,
// a segment, an MR, a CQ and a QP (handles 1 to 6), and checks that each
// gets its reply, the daemon never panics, and ending the session leaves
// no object and no descriptor behind.
//
// Input: messages of [op index, handle, body length, body...]; an op index
// with the top bit set takes a raw opcode from the next byte instead of
// the table's.
func FuzzSession(f *testing.F) {
	srv, sock := startDaemon(f)
	f.Add([]byte{0x05, 1, 0})                          // alloc_pd on the device
	f.Add([]byte{0x0a, 2, 48, 1, 0, 0, 0, 7})          // reg_mr, short
	f.Add([]byte{0x13, 6, 96, 2, 0, 0, 0, 0, 0, 0, 0}) // modify_qp
	f.Add([]byte{0x80, 0x99, 6, 0})                    // an unknown opcode
	f.Add([]byte{0x14, 6, 0, 0x15, 5, 0, 0x04, 2, 0})  // destroy QP, CQ, dealloc PD
	specs := proto.Specs()
	cmOp := func(op proto.Op) byte {
		for i, s := range specs {
			if s.Op == op {
				return byte(i)
			}
		}
		panic("no such op")
	}
	conn := make([]byte, 24)
	conn[0] = 6                                                                 // qp 6
	f.Add(append([]byte{cmOp(proto.OpCMConnect), 9, byte(len(conn))}, conn...)) // connect ID 9 to the listener
	f.Add([]byte{cmOp(proto.OpCMQuery), 9, 0, cmOp(proto.OpCMDestroyID), 8, 0})
	f.Add([]byte{cmOp(proto.OpCMCreateID), 7, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0x11, 0x01, 4, 0, 0, 0, 0, 0})
	f.Add([]byte{cmOp(proto.OpCMDestroyEventChannel), 7, 0, cmOp(proto.OpCMMigrateID), 9, 8, 7, 0, 0, 0, 0, 0, 0, 0})
	baseline := -1
	f.Fuzz(func(t *testing.T, data []byte) { fuzzSession(t, srv, sock, specs, data, &baseline) })
}

// TestRandomSessions runs FuzzSession's body on random inputs, so that
// plain go test covers more than the seeds.
func TestRandomSessions(t *testing.T) {
	srv, sock := startDaemon(t)
	specs := proto.Specs()
	baseline := -1
	rng := rand.New(rand.NewSource(int64(os.Getpid())))
	n := 300
	if testing.Short() {
		n = 30
	}
	for i := 0; i < n; i++ {
		data := make([]byte, rng.Intn(400))
		rng.Read(data)
		fuzzSession(t, srv, sock, specs, data, &baseline)
	}
}

func fuzzSession(t *testing.T, srv *rvtd.Server, sock string, specs []proto.Spec, data []byte, baseline *int) {
	{
		stuck := time.AfterFunc(30*time.Second, func() {
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			panic("fuzz input stuck: " + hex.EncodeToString(data))
		})
		defer stuck.Stop()
		c, err := client.Dial(sock, "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		setup(t, c)
		id := uint32(1000)
		for len(data) >= 3 {
			var op proto.Op
			if data[0]&0x80 != 0 {
				op = proto.Op(data[1]) | proto.Op(data[0]&0x7f)<<8
				data = data[1:]
			} else {
				op = specs[int(data[0])%len(specs)].Op
			}
			if len(data) < 3 {
				break
			}
			h, n := uint32(data[1]), int(data[2])
			data = data[3:]
			n = min(n, len(data))
			body := data[:n]
			data = data[n:]
			id++
			b := make([]byte, proto.HeaderSize+len(body))
			proto.PutHeader(b, proto.Header{Length: uint32(len(b)), Op: op, ReqID: id, Handle: h})
			copy(b[proto.HeaderSize:], body)
			if err := c.Conn().WriteRaw(b, nil); err != nil {
				t.Fatalf("op %#x: %v", uint16(op), err)
			}
			_ = c.Conn().UnixConn().SetReadDeadline(time.Now().Add(5 * time.Second))
			raw, fds, err := c.Conn().ReadRaw()
			if err != nil {
				t.Fatalf("op %#x handle %d body %x: no reply: %v", uint16(op), h, body, err)
			}
			for _, fd := range fds {
				syscall.Close(fd)
			}
			rh, err := proto.ParseHeader(raw, len(fds))
			if err != nil || rh.ReqID != id || rh.Flags != proto.FlagReply {
				t.Fatalf("op %#x: reply %+v %v", uint16(op), rh, err)
			}
		}
		c.Close()
		waitFor(t, "the session's teardown", func() bool {
			st := srv.Stats()
			return st.Sessions == 0 && st.QPs == 0 && st.CQs == 0 && srv.CMStats().IDs == 0
		})
		fds := openFDs(t)
		if *baseline < 0 {
			*baseline = fds
		} else if fds > *baseline {
			// The runtime may have opened something meanwhile; look again.
			time.Sleep(20 * time.Millisecond)
			if fds = openFDs(t); fds > *baseline {
				t.Fatalf("%d descriptors open, %d after the first input", fds, *baseline)
			}
		}
	}
}

// setup makes handles 1 to 6: device, PD, segment, MR, CQ, QP; it closes
// every descriptor the replies pass.
func setup(t *testing.T, c *client.Client) {
	call := func(op proto.Op, h uint32, body proto.Body) proto.Body {
		r, err := c.Call(op, h, body)
		if err != nil {
			t.Fatalf("setup op %#x: %v", uint16(op), err)
		}
		return r
	}
	syscall.Close(call(proto.OpOpenDevice, 0, &proto.OpenDevice{Name: "rvt0"}).(*proto.OpenDeviceReply).AsyncFD)
	call(proto.OpAllocPD, 1, nil)
	syscall.Close(call(proto.OpShmAlloc, 1, &proto.ShmAlloc{Size: 1 << 16}).(*proto.ShmAllocReply).FD)
	call(proto.OpRegMR, 2, &proto.RegMR{Kind: proto.MRShm, Access: 7, Addr: 0x10000, IOVA: 0x10000, Length: 1 << 16, Shm: 3})
	syscall.Close(call(proto.OpCreateCQ, 1, &proto.CreateCQ{CQE: 16}).(*proto.CQReply).FD)
	r := call(proto.OpCreateQP, 2, &proto.CreateQP{Type: 2, SendCQ: 5, RecvCQ: 5, Cap: proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}).(*proto.QPReply)
	syscall.Close(r.MemFD)
	syscall.Close(r.Doorbell)
	// rdma_cm: channel 7, a listener 8 on rvt0's address, an ID 9
	// resolved to it (random connects with QP 6 reach the listener).
	syscall.Close(call(proto.OpCMCreateEventChannel, 0, nil).(*proto.CMChannelReply).FD)
	call(proto.OpCMCreateID, 7, &proto.CMCreateID{PortSpace: proto.PSTCP, QPType: 2})
	call(proto.OpCMBindAddr, 8, &proto.CMBindAddr{Addr: client.CMAddr(netip.AddrPortFrom(ip0, 4791))})
	call(proto.OpCMListen, 8, &proto.CMListen{Backlog: 4})
	call(proto.OpCMCreateID, 7, &proto.CMCreateID{PortSpace: proto.PSTCP, QPType: 2})
	call(proto.OpCMResolveAddr, 9, &proto.CMResolveAddr{Dst: client.CMAddr(netip.AddrPortFrom(ip0, 4791))})
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
