package perftest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/rvt"
)

// RunPair runs both sides of cfg's tool in this process, the server on
// server and the client on client, through the real exchange on a TCP
// socket on 127.0.0.1 (an ephemeral port unless port is not 0), or, with
// -R or -z, through rdma_cm to the server device's first IPv4 address on
// cfg.Port (port, if not 0) of the server's CM agent. The
// client prints to stdout and stderr, as the perftest client would; the
// server to serverOut (nil: nowhere). It returns the first error of
// either side.
func RunPair(cfg Config, client, server *rvt.Device, port int, stdout, stderr, serverOut io.Writer) error {
	return RunPairWith(cfg, client, server, PairOptions{Port: port, Stdout: stdout, Stderr: stderr, ServerOut: serverOut})
}

// PairOptions are RunPairWith's: RunPair's arguments, and where the
// client's rows go.
type PairOptions struct {
	Port                      int
	Stdout, Stderr, ServerOut io.Writer
	Results                   *Results // the client's rows, if not nil
}

// RunPairWith is RunPair with the client's results recorded.
func RunPairWith(cfg Config, client, server *rvt.Device, o PairOptions) error {
	port, stdout, stderr, serverOut := o.Port, o.Stdout, o.Stderr, o.ServerOut
	if cfg.RDMACM || cfg.CommRDMACM {
		return runPairCM(cfg, client, server, port, stdout, stderr, serverOut, o.Results)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer ln.Close()
	scfg := cfg
	scfg.Server = ""
	if serverOut == nil {
		serverOut = io.Discard
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(scfg, Env{Dev: server, Stdout: serverOut, Stderr: serverOut, Listener: ln})
	}()
	ccfg := cfg
	ccfg.Server = "127.0.0.1"
	ccfg.Port = ln.Addr().(*net.TCPAddr).Port
	cerr := Run(ccfg, Env{Dev: client, Stdout: stdout, Stderr: stderr, Results: o.Results})
	if cerr != nil {
		// The server may wait for a client that gave up: stop it.
		ln.Close()
	}
	serr := <-done
	if cerr != nil {
		return cerr
	}
	if serr != nil {
		return errors.Join(errors.New("server"), serr)
	}
	return nil
}

// runPairCM is RunPair over rdma_cm: the server's listener is up before
// the client dials, as a perftest server is started first.
func runPairCM(cfg Config, client, server *rvt.Device, port int, stdout, stderr, serverOut io.Writer, res *Results) error {
	if port != 0 {
		cfg.Port = port
	}
	ip, err := firstIPv4(server)
	if err != nil {
		return err
	}
	ag, err := cm.AgentFor(server)
	if err != nil {
		return err
	}
	ln, err := ag.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(cfg.Port)), &cm.ListenOptions{PortSpace: cm.PSTCP, Backlog: 1})
	if err != nil {
		return fmt.Errorf("rdma_cm listen on port %d: %w", cfg.Port, err)
	}
	defer ln.Close()
	scfg := cfg
	scfg.Server = ""
	if serverOut == nil {
		serverOut = io.Discard
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(scfg, Env{Dev: server, Stdout: serverOut, Stderr: serverOut, CMListener: ln})
	}()
	ccfg := cfg
	ccfg.Server = ip.String()
	cerr := Run(ccfg, Env{Dev: client, Stdout: stdout, Stderr: stderr, Results: res})
	if cerr != nil {
		ln.Close()
	}
	serr := <-done
	if cerr != nil {
		return cerr
	}
	if serr != nil {
		return errors.Join(errors.New("server"), serr)
	}
	return nil
}

// firstIPv4 returns the address of dev's first IPv4-mapped GID.
func firstIPv4(dev *rvt.Device) (netip.Addr, error) {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return netip.Addr{}, err
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		g, err := dev.QueryGID(1, i)
		if err != nil {
			break
		}
		if a := netip.AddrFrom16(g); a.Is4In6() {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("device %s has no IPv4 address for rdma_cm", dev.Name())
}
