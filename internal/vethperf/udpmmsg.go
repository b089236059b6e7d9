package vethperf

// The batched kernel UDP baseline: what a user who wants the veth's UDP
// throughput writes, one sendmmsg of udpMmsgBatch MTU-sized datagrams per
// system call on a connected socket, and recvmmsg of as many on the
// receiver. The one-datagram-per-Write baseline (udpStream) is what a
// plain Go program gets; this one is the fairer bar for a link that
// batches its own transmits (issue 19).

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/internal/traffic"
)

// udpMmsgBatch is the number of datagrams per sendmmsg and recvmmsg call.
const udpMmsgBatch = 32

// perfUDPMmsgPort is the batched baseline's port.
const perfUDPMmsgPort = 18603

// mmsgVec is a batch of n buffers of size bytes and the headers that
// point at them.
func mmsgVec(n, size int) ([]unix.Mmsghdr, [][]byte) {
	hdrs := make([]unix.Mmsghdr, n)
	iovs := make([]unix.Iovec, n)
	bufs := make([][]byte, n)
	for i := range hdrs {
		bufs[i] = make([]byte, size)
		iovs[i] = unix.Iovec{Base: &bufs[i][0]}
		iovs[i].SetLen(size)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	return hdrs, bufs
}

// udpStreamMmsg is udpStream with sendmmsg and recvmmsg batches.
func udpStreamMmsg(ctx context.Context, n *perfNet, size int, dur time.Duration) (traffic.Result, error) {
	var r traffic.Result
	tx, rx, err := udpPair(n, perfUDPMmsgPort)
	if err != nil {
		return r, err
	}
	defer tx.Close()
	defer rx.Close()
	rrc, err := rx.SyscallConn()
	if err != nil {
		return r, err
	}
	trc, err := tx.SyscallConn()
	if err != nil {
		return r, err
	}

	type total struct {
		count, bytes, last int64
	}
	done := make(chan total, 1)
	var progress = make(chan int64, 1) // the count so far, for the drain check
	_ = rx.SetReadDeadline(time.Now().Add(dur + traffic.WaitTimeout))
	go func() {
		var t total
		hdrs, _ := mmsgVec(udpMmsgBatch, 65536)
		for {
			var got int
			var errno syscall.Errno
			err := rrc.Read(func(fd uintptr) bool {
				r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), udpMmsgBatch,
					unix.MSG_DONTWAIT, 0, 0)
				got, errno = int(r), e
				return e != unix.EAGAIN
			})
			if err != nil {
				done <- t
				return
			}
			if errno != 0 {
				continue // EINTR, or an ICMP error queued on the socket
			}
			for _, h := range hdrs[:got] {
				t.bytes += int64(h.Len)
			}
			t.count += int64(got)
			t.last = time.Now().UnixNano()
			select {
			case <-progress:
			default:
			}
			progress <- t.count
		}
	}()

	hdrs, bufs := mmsgVec(udpMmsgBatch, size)
	for _, b := range bufs {
		traffic.Fill(b, 7)
	}
	start := time.Now()
	deadline := start.Add(dur)
	var sendErr error
	for i := 0; ; i++ {
		if i&7 == 0 && (time.Now().After(deadline) || ctx.Err() != nil) {
			break
		}
		var errno syscall.Errno
		if err := trc.Write(func(fd uintptr) bool {
			_, _, errno = unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), udpMmsgBatch, 0, 0, 0)
			return errno != unix.EAGAIN
		}); err != nil {
			sendErr = err
			break
		}
		if errno != 0 && errno != unix.ENOBUFS && errno != unix.ECONNREFUSED && errno != unix.EINTR {
			sendErr = errno
			break
		}
	}
	for prev := int64(-1); ; {
		time.Sleep(20 * time.Millisecond)
		var cur int64
		select {
		case cur = <-progress:
		default:
			cur = prev
		}
		if cur == prev || time.Since(start) > dur+traffic.WaitTimeout {
			break
		}
		prev = cur
	}
	_ = rx.SetReadDeadline(time.Now())
	t := <-done
	if sendErr != nil {
		return r, fmt.Errorf("udp sendmmsg: %w", sendErr)
	}
	if t.count == 0 {
		return r, errors.New("udp sendmmsg stream: nothing arrived")
	}
	r.Ops, r.Bytes, r.Elapsed = t.count, t.bytes, time.Unix(0, t.last).Sub(start)
	return r, nil
}
