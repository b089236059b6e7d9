// Package cmtooltest runs the rdma_cm tools' two sides in tests: on the
// in-memory pair, or on two UDP links on loopback (127.0.0.1 and
// 127.0.0.2, port 4791) in a network namespace of their own.
package cmtooltest

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/rvt"
)

// Output is what one side printed and returned.
type Output struct {
	Stdout, Stderr string
	Err            error
}

// Lines returns s split into lines, without the last newline.
func Lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// Devices are the two devices of a run and the server's address.
type Devices struct {
	Server, Client *rvt.Device
	ServerAddr     netip.Addr
}

// Fabric opens the demo's in-memory pair (rvt1 is the server).
func Fabric(t *testing.T) Devices {
	t.Helper()
	p, err := devopen.OpenPair(devopen.PairConfig{LinkMTU: 1500, Seed: 1})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return Devices{Server: p.N[1].Dev, Client: p.N[0].Dev, ServerAddr: netip.MustParseAddr(cmtool.PairServerAddr(p))}
}

// UDP opens two devices on UDP links on 127.0.0.2 (server) and 127.0.0.1
// (client), in a fresh network namespace (root only: skipped otherwise).
func UDP(t *testing.T) Devices {
	t.Helper()
	nettest.RequireRoot(t)
	ns := nettest.New(t)
	var d Devices
	for i, ip := range []string{"127.0.0.2", "127.0.0.1"} {
		var l *devopen.Link
		require.NoError(t, ns.Do(func() (err error) {
			l, err = devopen.Open(devopen.Config{UDP: ip})
			return err
		}))
		t.Cleanup(l.Close)
		dev, err := rvt.Open(l.Options("rvt0"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = dev.Close() })
		if i == 0 {
			d.Server = dev
		} else {
			d.Client = dev
		}
	}
	d.ServerAddr = netip.MustParseAddr("127.0.0.2")
	return d
}

// Run runs server on d.Server and, once it listens, client on d.Client,
// and returns what each printed. The server gets until timeout after the
// client ended.
func Run(t *testing.T, d Devices, timeout time.Duration, server cmtool.Side, client func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error) (s, c Output) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var sout, serr, cout, cerr bytes.Buffer
	listening := make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Err = server(ctx, d.Server, cmtool.Out{Stdout: &sout, Stderr: &serr}, func() { once.Do(func() { close(listening) }) })
	}()
	select {
	case <-listening:
		c.Err = client(ctx, d.Client, cmtool.Out{Stdout: &cout, Stderr: &cerr})
		if c.Err != nil {
			cancel()
		}
		<-done
	case <-done:
	}
	s.Stdout, s.Stderr, c.Stdout, c.Stderr = sout.String(), serr.String(), cout.String(), cerr.String()
	t.Logf("server stdout:\n%sserver stderr:\n%s(err %v)\nclient stdout:\n%sclient stderr:\n%s(err %v)",
		s.Stdout, s.Stderr, s.Err, c.Stdout, c.Stderr, c.Err)
	return s, c
}
