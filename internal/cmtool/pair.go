package cmtool

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/rvt"
)

// Side runs one side of a tool on dev. A server calls listening once it
// accepts connections (the client starts then).
type Side func(ctx context.Context, dev *rvt.Device, out Out, listening func()) error

// ServerGrace is how long RunPair lets the server finish after the client
// ended without error (the server may still be sending its last lines).
const ServerGrace = 30 * time.Second

// RunPair runs both sides of a tool in this process, as `rvt demo` does:
// the server on the pair's rvt1 (198.18.0.2), the client on rvt0. The
// client's lines go to out as they come, under a "--- client" header; the
// server's follow once it ended, under a "--- server" header. The error
// is the client's, else the server's.
func RunPair(ctx context.Context, p *devopen.Pair, out Out, server, client Side) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sout, serr bytes.Buffer
	listening := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		err := server(sctx, p.N[1].Dev, Out{&sout, &serr}, func() { close(listening) })
		done <- err
	}()
	var sErr, cErr error
	select {
	case <-listening:
		out.Printf("--- client (%s, %v)\n", p.N[0].Dev.Name(), p.N[0].Addrs[len(p.N[0].Addrs)-1].Unmap())
		cErr = client(ctx, p.N[0].Dev, out, nil)
		if cErr != nil {
			cancel()
		}
		select {
		case sErr = <-done:
		case <-time.After(ServerGrace):
			cancel()
			sErr = <-done
		}
	case sErr = <-done:
	}
	out.Printf("--- server (%s, %v)\n", p.N[1].Dev.Name(), p.N[1].Addrs[len(p.N[1].Addrs)-1].Unmap())
	// Standard error first: the tools' stderr is unbuffered, so on a
	// terminal its lines come before the buffered stdout's.
	_, _ = out.Stderr.Write(serr.Bytes())
	_, _ = out.Stdout.Write(sout.Bytes())
	if cErr != nil {
		return fmt.Errorf("client: %w", cErr)
	}
	if sErr != nil {
		return fmt.Errorf("server: %w", sErr)
	}
	return nil
}

// PairServerAddr is the address of the pair's server device (rvt1).
func PairServerAddr(p *devopen.Pair) string {
	return p.N[1].Addrs[len(p.N[1].Addrs)-1].Unmap().String()
}
