package proto

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestConnPassesDescriptors(t *testing.T) {
	a, b, err := Pair()
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()

	// A memfd travels with the reply that names it, and arrives as a new
	// descriptor of the same file.
	mfd, err := unix.MemfdCreate("proto-test", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(mfd)
	require.NoError(t, unix.Ftruncate(mfd, 4096))
	rfd, wfd, err := RawPair()
	require.NoError(t, err)
	defer unix.Close(rfd)
	defer unix.Close(wfd)

	h := Header{Op: OpCreateQP, Flags: FlagReply, ReqID: 9}
	sent := &QPReply{QP: 1, QPN: 17, MapSize: 4096, SQ: RingLayout{Entries: 64, Stride: 128}, MemFD: mfd, Doorbell: wfd}
	require.NoError(t, a.Send(h, sent))
	m, err := b.Recv()
	require.NoError(t, err)
	got := m.Body.(*QPReply)
	defer unix.Close(got.MemFD)
	defer unix.Close(got.Doorbell)
	require.Equal(t, uint8(2), m.NFDs)
	require.NotEqual(t, mfd, got.MemFD)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(got.MemFD, &st))
	require.Equal(t, int64(4096), st.Size)
	require.Equal(t, uint32(17), got.QPN)
	flags, err := unix.FcntlInt(uintptr(got.MemFD), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.NotZero(t, flags&unix.FD_CLOEXEC, "received descriptors are close-on-exec")

	// Each message is one datagram: two sends are two receives.
	require.NoError(t, a.Send(Header{Op: OpAllocPD, ReqID: 1, Handle: 1}, nil))
	require.NoError(t, a.Send(Header{Op: OpAllocPD, ReqID: 2, Handle: 1}, nil))
	for want := uint32(1); want <= 2; want++ {
		m, err := b.Recv()
		require.NoError(t, err)
		require.Equal(t, want, m.ReqID)
	}

	cred, err := b.PeerCred()
	require.NoError(t, err)
	require.Equal(t, int32(os.Getpid()), cred.Pid)
}

func TestConnRefusesBadDatagrams(t *testing.T) {
	a, b, err := Pair()
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()

	// Garbage, then a datagram longer than MaxMessage, then descriptors the
	// header does not announce: each is a framing error, the descriptors
	// are closed, and the connection still works after.
	require.NoError(t, a.WriteRaw([]byte("hello, daemon"), nil))
	_, err = b.Recv()
	require.ErrorIs(t, err, ErrFraming)

	require.NoError(t, unix.SetsockoptInt(fdOf(t, a), unix.SOL_SOCKET, unix.SO_SNDBUF, 4*MaxMessage))
	require.NoError(t, a.WriteRaw(make([]byte, MaxMessage+100), nil))
	_, err = b.Recv()
	require.ErrorIs(t, err, ErrFraming)

	pfd, _, err := RawPair()
	require.NoError(t, err)
	require.NoError(t, a.WriteRaw(hello(), []int{pfd}))
	unix.Close(pfd)
	_, err = b.Recv()
	require.ErrorIs(t, err, ErrFraming)

	require.NoError(t, a.WriteRaw(hello(), nil))
	m, err := b.Recv()
	require.NoError(t, err)
	require.Equal(t, "test", m.Body.(*Hello).Client)

	require.NoError(t, a.Close())
	_, err = b.Recv()
	require.ErrorIs(t, err, io.EOF)
}

func fdOf(t *testing.T, c *Conn) int {
	rc, err := c.UnixConn().SyscallConn()
	require.NoError(t, err)
	var fd int
	require.NoError(t, rc.Control(func(f uintptr) { fd = int(f) }))
	return fd
}

func TestListenDial(t *testing.T) {
	path := t.TempDir() + "/rvtd.sock"
	l, err := Listen(path)
	require.NoError(t, err)
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			done <- err
			return
		}
		s := NewConn(c)
		defer s.Close()
		m, err := s.Recv()
		if err != nil {
			done <- err
			return
		}
		done <- s.Send(Header{Op: OpHello, Flags: FlagReply, ReqID: m.ReqID},
			&HelloReply{Magic: Magic, Major: Major, Minor: Minor, MaxMessage: MaxMessage})
	}()
	c, err := Dial(path)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.WriteRaw(hello(), nil))
	m, err := c.Recv()
	require.NoError(t, err)
	require.Equal(t, uint32(7), m.ReqID)
	require.Equal(t, uint32(MaxMessage), m.Body.(*HelloReply).MaxMessage)
	require.NoError(t, <-done)
}
