package perftest

import (
	"errors"
	"io"
	"net"
	"strconv"

	"github.com/softverbs/softverbs/rvt"
)

// RunPair runs both sides of cfg's tool in this process, the server on
// server and the client on client, through the real exchange on a TCP
// socket on 127.0.0.1 (an ephemeral port unless port is not 0). The
// client prints to stdout and stderr, as the perftest client would; the
// server to serverOut (nil: nowhere). It returns the first error of
// either side.
func RunPair(cfg Config, client, server *rvt.Device, port int, stdout, stderr, serverOut io.Writer) error {
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
	cerr := Run(ccfg, Env{Dev: client, Stdout: stdout, Stderr: stderr})
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
