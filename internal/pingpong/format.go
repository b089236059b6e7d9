package pingpong

import (
	"fmt"
	"io"
	"strings"
)

// LocalLine is the tools' line for our address. ibv_ud_pingpong's says
// "PSN 0x...: GID" where the others say "PSN 0x..., GID", a quirk kept
// for fidelity.
func LocalLine(mode string, d Dest) string {
	sep := ", "
	if mode == "ud" {
		sep = ": "
	}
	return AddressLine("local address: ", d, sep)
}

// RemoteLine is the tools' line for the peer's address.
func RemoteLine(d Dest) string { return AddressLine("remote address:", d, ", ") }

// AddressPrinter returns an address callback for Run that writes the
// tools' address lines to w.
func AddressPrinter(w io.Writer, mode string) func(local bool, d Dest) {
	return func(local bool, d Dest) {
		if local {
			fmt.Fprint(w, LocalLine(mode, d))
		} else {
			fmt.Fprint(w, RemoteLine(d))
		}
	}
}

// Lines are the tools' result lines: bytes and rate, iterations and time
// per iteration, then a line for each bad page the server's -c found.
func (r Result) Lines() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d bytes in %.2f seconds = %.2f Mbit/sec\n",
		r.Bytes, float64(r.Usec)/1e6, float64(r.Bytes)*8/float64(r.Usec))
	fmt.Fprintf(&b, "%d iters in %.2f seconds = %.2f usec/iter\n",
		r.Iters, float64(r.Usec)/1e6, float64(r.Usec/float32(r.Iters)))
	for _, p := range r.BadPages {
		fmt.Fprintf(&b, "invalid data in page %d\n", p)
	}
	return b.String()
}
