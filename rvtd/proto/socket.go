package proto

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Conn is one end of a client connection: a SOCK_SEQPACKET unix socket on
// which each message is one datagram, and descriptors travel with the
// datagram they belong to. Send and Recv may be called from different
// goroutines; each is serialized with itself.
type Conn struct {
	c *net.UnixConn

	smu  sync.Mutex
	sbuf []byte

	rmu  sync.Mutex
	rbuf []byte
	oob  []byte
}

// NewConn wraps a connected unixpacket socket.
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{
		c:    c,
		rbuf: make([]byte, MaxMessage+1), // one more, so an over-long datagram is seen
		oob:  make([]byte, unix.CmsgSpace(4*(MaxFDs+1))),
	}
}

// Dial connects to the daemon's socket.
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	return NewConn(c), nil
}

// Listen opens the daemon's listening socket at path.
func Listen(path string) (*net.UnixListener, error) {
	return net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
}

// Pair returns two connected ends (socketpair(AF_UNIX, SOCK_SEQPACKET)),
// for the event sockets and for tests.
func Pair() (*Conn, *Conn, error) {
	a, b, err := RawPair()
	if err != nil {
		return nil, nil, err
	}
	ca, err := fileConn(a)
	if err != nil {
		unix.Close(b)
		return nil, nil, err
	}
	cb, err := fileConn(b)
	if err != nil {
		ca.Close()
		return nil, nil, err
	}
	return NewConn(ca), NewConn(cb), nil
}

// RawPair returns the descriptors of a new SOCK_SEQPACKET socketpair (close
// on exec): one end to keep, one to pass to a client.
func RawPair() (int, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socketpair: %w", err)
	}
	return fds[0], fds[1], nil
}

// FileConn makes a Conn of a descriptor holding a SOCK_SEQPACKET socket
// (one received from the daemon, or inherited). It takes the descriptor.
func FileConn(fd int) (*Conn, error) {
	c, err := fileConn(fd)
	if err != nil {
		return nil, err
	}
	return NewConn(c), nil
}

func fileConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "seqpacket")
	defer f.Close() // net.FileConn dups it
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("not a unix socket")
	}
	return uc, nil
}

// UnixConn returns the socket (for SO_PEERCRED, deadlines, Close).
func (c *Conn) UnixConn() *net.UnixConn { return c.c }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send encodes and sends one message with the descriptors its body names.
// The descriptors stay open: the caller closes its copies.
func (c *Conn) Send(h Header, body Body) error {
	c.smu.Lock()
	defer c.smu.Unlock()
	b, fds, err := Encode(c.sbuf[:0], h, body)
	c.sbuf = b[:0]
	if err != nil {
		return err
	}
	return c.write(b, fds)
}

// WriteRaw sends b as one datagram with fds, unchecked (for records on the
// event sockets, and for tests that send garbage).
func (c *Conn) WriteRaw(b []byte, fds []int) error {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.write(b, fds)
}

func (c *Conn) write(b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n != len(b) || oobn != len(oob) {
		return fmt.Errorf("short send: %d of %d bytes", n, len(b))
	}
	return nil
}

// ReadRaw receives one datagram into a buffer of its own and returns its
// bytes (valid until the next ReadRaw or Recv) and the descriptors that came
// with it, which the caller owns. A datagram longer than MaxMessage, or
// descriptors cut short, is ErrFraming (any descriptors received are
// closed). io.EOF: the peer closed.
func (c *Conn) ReadRaw() ([]byte, []int, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.rbuf, c.oob)
	if errors.Is(err, io.EOF) {
		return nil, nil, io.EOF
	}
	if err != nil {
		return nil, nil, err
	}
	fds, perr := parseRights(c.oob[:oobn])
	switch {
	case perr != nil:
		closeAll(fds)
		return nil, nil, perr
	case flags&unix.MSG_CTRUNC != 0 || len(fds) > MaxFDs:
		closeAll(fds)
		return nil, nil, framing("more than %d descriptors", MaxFDs)
	case flags&unix.MSG_TRUNC != 0 || n > MaxMessage:
		closeAll(fds)
		return nil, nil, framing("datagram longer than %d bytes", MaxMessage)
	case n == 0 && len(fds) == 0:
		return nil, nil, io.EOF // a zero-length datagram reads as the end
	}
	return c.rbuf[:n], fds, nil
}

// Recv receives and decodes one message. On a decode error the descriptors
// that came are closed and the header is returned as far as it was read.
func (c *Conn) Recv() (Msg, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	b, fds, err := c.ReadRaw()
	if err != nil {
		return Msg{}, err
	}
	m, err := Decode(b, fds)
	if err != nil {
		closeAll(fds)
	}
	return m, err
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, framing("control message: %v", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		r, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(fds)
			return nil, framing("rights: %v", err)
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// PeerCred returns the pid, uid and gid of the process at the other end
// (SO_PEERCRED, as of connect).
func (c *Conn) PeerCred() (*unix.Ucred, error) {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}
