// Package rvtd is the softverbs daemon as a library: it owns devices (from
// a Config), serves client sessions on a unix socket with the protocol of
// docs/rvtd-protocol.md, and runs the data path between the clients'
// shared-memory rings and the embedded engines. cmd/rvtd is a thin main
// around it; tests and programs can embed a daemon the way Tailscale's tsnet
// embeds tailscaled.
//
// Lock order: Server.mu, then session.mu; cqObj.mu, then qpObj.mu; loop.mu
// and device maps are leaves. No lock is held across a call into the
// engine that can raise an async event, except qpObj.mu (the event handler
// takes no QP or CQ lock).
package rvtd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// ErrRunning is returned by Listen when another rvtd answers on the socket.
var ErrRunning = errors.New("another rvtd is serving this socket")

// DefaultSocket is where rvtd listens and clients connect when nothing else
// is said: $RVTD_SOCKET, else /run/rvtd/rvtd.sock for root, else
// $XDG_RUNTIME_DIR/rvtd.sock (or /tmp/rvtd-UID.sock without it).
func DefaultSocket() string { return client.DefaultSocket() }

// Options are how a Server runs, beside what it serves (Config).
type Options struct {
	Logger *slog.Logger // nil: discard
	Clock  clock.Clock  // nil: the real one
	// Loops is the number of data-path goroutines (each an epoll loop over
	// its share of the QPs' doorbells); 0: DefaultLoops.
	Loops int
	// Spin is how long a loop keeps polling the rings it served after
	// work, before it sleeps (busy clients then ring no doorbell, and a
	// request's answer finds the loop awake); 0: DefaultSpin; negative:
	// never.
	Spin time.Duration
}

// DefaultSpin is Options.Spin's default. On 2 CPUs shared with the
// clients, 200 us made round trips through the daemon about half as long
// and the message rate 1.6-2 x higher than no spin; 1 ms did no better
// (docs/rvtd.md, Figures, session 14).
const DefaultSpin = 200 * time.Microsecond

// DefaultLoops is Options.Loops' default. One loop, with the default
// devices' receive_here, drains the receiving CQ on the goroutine that
// posted the request: on 2 CPUs shared with busy-polling clients each
// goroutine woken on a request's way waited for a CPU, 47 us on average
// (perf sched), and an 8-byte round trip through the daemon was about
// half as long with one loop and receive_here as with two loops and none
// (docs/rvtd.md, Figures, session 13).
const DefaultLoops = 1

// Server is a running daemon: its devices, its listener, its sessions.
type Server struct {
	cfg     *Config
	log     *slog.Logger
	clk     clock.Clock
	spin    time.Duration // Options.Spin, resolved
	spinner atomic.Int32  // the id of the loop that spins, 0: none
	// drainHold, if set, is called before a loop drains a CQ: a test's
	// way to hold the loops back (HoldDrainsForTest).
	drainHold atomic.Pointer[func(*cqObj)]
	devices   []*device
	byName    map[string]*device
	// cmRecordCharge is one cm_event record's charge on an event
	// socket's send queue (recordCharge), for listen backlogs.
	cmRecordCharge int
	loops          []*loop
	fdLimit        int // descriptors one session may hold (limits.fds, resolved)
	// userFDLimit: descriptors the sessions of one uid may hold together
	// (limits.user_fds, resolved).
	userFDLimit int

	umu   sync.Mutex          // guards users; a leaf (fds.go)
	users map[uint32]*userFDs // by uid, while it has sessions

	mu       sync.Mutex
	ln       *net.UnixListener
	path     string
	sessions map[uint32]*session
	nextSess uint32
	closing  bool
	wg       sync.WaitGroup // session goroutines
	done     chan struct{}  // closed when Shutdown has finished

	// Counters.
	protoErrors atomic.Uint64 // sessions ended by a protocol error
	badRequests atomic.Uint64 // requests refused with EPROTO or EOPNOTSUPP
}

// device is one served device and the objects of every session on it that
// the engine's callbacks must find (by QP number, by engine CQ).
type device struct {
	srv   *Server
	cfg   DeviceConfig
	dev   *rvt.Device
	link  *devopen.Link
	unsub func()
	qps   sync.Map // QP number -> *qpObj
	cqs   sync.Map // *cq.CQ -> *cqObj
}

// New opens the devices of cfg (nil: DefaultConfig) and starts the data
// path. It does not listen yet (Listen).
func New(cfg *Config, o Options) (_ *Server, err error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	cfg.fill()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, clk: clock.OrReal(o.Clock), byName: map[string]*device{}, sessions: map[uint32]*session{}, users: map[uint32]*userFDs{}, done: make(chan struct{})}
	defer func() {
		if err != nil {
			s.closeDevices()
		}
	}()
	s.cmRecordCharge = recordCharge(proto.CMEventRecordSize)
	fabrics := map[string]*fabric.Fabric{}
	for _, dc := range cfg.Devices {
		lc := devopen.Config{TAP: dc.TAP, XDP: dc.XDP, UDP: dc.UDP, IP: dc.IP, Gateway: dc.Gateway, MAC: dc.MAC, LinkMTU: dc.MTU}
		if dc.Fabric != "" {
			f := fabrics[dc.Fabric]
			if f == nil {
				f = fabric.New(s.clk, 1)
				fabrics[dc.Fabric] = f
			}
			lc.Fabric = f
		}
		l, err := devopen.Open(lc)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", dc.Name, err)
		}
		opts := l.Options(dc.Name)
		opts.Logger = log.With("device", dc.Name)
		opts.ReceiveHere = dc.ReceiveHere
		dev, err := rvt.Open(opts)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("device %s: %w", dc.Name, err)
		}
		d := &device{srv: s, cfg: dc, dev: dev, link: l}
		d.unsub = dev.Subscribe(d.event)
		s.devices = append(s.devices, d)
		if err := d.openCM(); err != nil {
			return nil, fmt.Errorf("device %s: %w", dc.Name, err)
		}
		s.byName[dc.Name] = d
		log.Info("device open", "device", dc.Name, "link", linkKind(dc), "ip", dc.IP, "mtu", dc.MTU)
	}
	n := o.Loops
	if n <= 0 {
		n = DefaultLoops
	}
	switch s.spin = o.Spin; {
	case s.spin == 0:
		s.spin = DefaultSpin
	case s.spin < 0:
		s.spin = 0
	}
	log.Info("data path", "loops", n, "spin", s.spin)
	for i := 0; i < n; i++ {
		lp, err := newLoop(s, i)
		if err != nil {
			return nil, err
		}
		s.loops = append(s.loops, lp)
	}
	for _, lp := range s.loops {
		go lp.run()
	}
	lim, nofile, open := DefaultFDLimit()
	s.fdLimit = lim
	if cfg.Limits.FDs > 0 {
		s.fdLimit = cfg.Limits.FDs
		if s.fdLimit > nofile-open {
			log.Warn("limits.fds is more than the daemon has left: one session can still take every descriptor", "fds", s.fdLimit, "rlimit_nofile", nofile, "open", open)
		}
	}
	s.userFDLimit = max(DefaultUserFDLimit(), s.fdLimit)
	if cfg.Limits.UserFDs > 0 {
		s.userFDLimit = cfg.Limits.UserFDs
		if s.userFDLimit > nofile-open {
			log.Warn("limits.user_fds is more than the daemon has left: one user can still take every descriptor", "user_fds", s.userFDLimit, "rlimit_nofile", nofile, "open", open)
		}
	}
	log.Info("descriptors", "per_session", s.fdLimit, "per_user", s.userFDLimit, "rlimit_nofile", nofile, "open", open)
	return s, nil
}

func linkKind(dc DeviceConfig) string {
	switch {
	case dc.Fabric != "":
		return "fabric:" + dc.Fabric
	case dc.TAP != "":
		return "tap:" + dc.TAP
	case dc.XDP != "":
		return "xdp:" + dc.XDP
	default:
		return "udp:" + dc.UDP
	}
}

// Listen opens the unix socket at path ("" : the config's, else
// DefaultSocket()). If a daemon answers there it fails with ErrRunning; a
// socket nobody answers on is stale and is removed.
func (s *Server) Listen(path string) error {
	if path == "" {
		path = s.cfg.Socket
	}
	if path == "" {
		path = DefaultSocket()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := CheckSocket(path, s.log); err != nil {
		return err
	}
	ln, err := proto.Listen(path)
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(true)
	s.mu.Lock()
	s.ln, s.path = ln, path
	s.mu.Unlock()
	s.log.Info("listening", "socket", path, "devices", len(s.devices))
	return nil
}

// CheckSocket makes ready to listen at path: if a daemon answers there it
// fails with ErrRunning; a socket nobody answers on is stale and is
// removed. cmd/rvtd calls it before opening devices, so that a second rvtd
// says why at once.
func CheckSocket(path string, log *slog.Logger) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := proto.Dial(path)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: %w (stop it first, or give another --socket)", path, ErrRunning)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("probing %s: %w", path, err)
	}
	if log != nil {
		log.Warn("removing stale socket", "path", path)
	}
	return os.Remove(path)
}

// Path is the socket the server listens on.
func (s *Server) Path() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.path
}

// Serve accepts client connections until Shutdown; it returns nil then.
func (s *Server) Serve() error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return errors.New("rvtd: Serve before Listen")
	}
	var backoff time.Duration
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if !acceptTemporary(err) {
				return err
			}
			// Out of descriptors or memory (a client holding many
			// objects, each a memfd or an eventfd here): the sessions
			// being served go on, and accepting resumes once some are
			// freed, as net/http's server does, rather than the
			// daemon stopping for everyone.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
				s.log.Warn("accept: waiting for resources", "err", err)
			} else {
				backoff = min(2*backoff, time.Second)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.nextSess++
		ss := newSession(s, s.nextSess, proto.NewConn(c))
		refuse, closeNow := s.admit(ss)
		if closeNow {
			s.mu.Unlock()
			ss.log.Debug("connection closed: its user has connections being refused already", "uid", ss.uid)
			c.Close()
			continue
		}
		ss.refused = refuse
		s.sessions[ss.id] = ss
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			ss.serve()
			s.mu.Lock()
			delete(s.sessions, ss.id)
			s.mu.Unlock()
		}()
	}
}

// acceptTemporary reports whether an accept error passes once resources
// are freed: out of descriptors (EMFILE, ENFILE), memory or buffers, or a
// connection aborted before it was taken.
func acceptTemporary(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Sessions is the number of client sessions connected.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Stats are the server's counters.
type Stats struct {
	Sessions    int
	ProtoErrors uint64 // sessions ended for a protocol error
	BadRequests uint64 // requests refused for a malformed body or unknown opcode
	QPs, CQs    int    // objects alive on the data path
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{Sessions: s.Sessions(), ProtoErrors: s.protoErrors.Load(), BadRequests: s.badRequests.Load()}
	for _, d := range s.devices {
		d.qps.Range(func(any, any) bool { st.QPs++; return true })
		d.cqs.Range(func(any, any) bool { st.CQs++; return true })
	}
	return st
}

// Shutdown stops accepting, tells every client (an IBV_EVENT_DEVICE_FATAL
// on each device it opened), ends the sessions and tears their objects
// down, then closes the devices and releases the links. ctx bounds the wait
// for sessions to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closing = true
	ln := s.ln
	sessions := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, ss := range sessions {
		ss.fatal()
	}
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	var err error
	select {
	case <-waited:
	case <-ctx.Done():
		err = ctx.Err()
	}
	for _, lp := range s.loops {
		lp.stop()
	}
	s.closeDevices()
	s.log.Info("stopped", "sessions_served", s.nextSess)
	close(s.done)
	return err
}

func (s *Server) closeDevices() {
	for i := len(s.devices) - 1; i >= 0; i-- {
		d := s.devices[i]
		if d.unsub != nil {
			d.unsub()
		}
		_ = d.dev.Close()
		d.link.Close()
	}
	s.devices = nil
}

// loopFor picks the data-path loop of a new QP or CQ.
func (s *Server) loopFor(n uint32) *loop { return s.loops[int(n)%len(s.loops)] }

// event routes an engine's async event to the session owning its object.
func (d *device) event(e rvt.Event) {
	switch {
	case e.CQ != nil:
		if v, ok := d.cqs.Load(e.CQ); ok {
			c := v.(*cqObj)
			if e.Type == rvt.EventType(0) { // CQ error: the ring is no longer served
				c.failed.Store(true)
				c.loop.kickCQ(c)
			}
			c.asyncEvents.Add(1)
			c.sess.asyncEvent(c.ctx, c.cookie, c.handle, uint32(e.Type))
		}
	case e.SRQ != nil:
		// SRQs are not served yet.
	case e.QPN != 0:
		if v, ok := d.qps.Load(e.QPN); ok {
			q := v.(*qpObj)
			q.asyncEvents.Add(1)
			q.sess.asyncEvent(q.ctx, q.cookie, q.handle, uint32(e.Type))
		}
	default: // port events: every session that opened the device
		for _, ss := range d.srv.sessionList() {
			for _, c := range ss.contexts(d) {
				ss.asyncEvent(c, 0, uint32(max(e.Port, 1)), uint32(e.Type))
			}
			ss.cmMcastPortEvent(d, e.Type) // joins lost (cmmcasterr.go)
		}
	}
}

// sessionList is a snapshot of the sessions.
func (s *Server) sessionList() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		l = append(l, ss)
	}
	return l
}

// Device returns the embedded device name serves (nil if none), for a
// program that embeds the daemon and drives a device itself (its
// addresses, its counters).
func (s *Server) Device(name string) *rvt.Device {
	if d := s.byName[name]; d != nil {
		return d.dev
	}
	return nil
}
