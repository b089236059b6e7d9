package client

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultSocket is where rvtd listens and clients connect when nothing else
// is said: $RVTD_SOCKET, else /run/rvtd/rvtd.sock for root, else
// $XDG_RUNTIME_DIR/rvtd.sock (or /tmp/rvtd-UID.sock without it). The
// daemon (rvtd.DefaultSocket) and the clients (rvt.Dial, the rvt tools'
// --rvtd) share this one definition.
func DefaultSocket() string {
	if s := os.Getenv("RVTD_SOCKET"); s != "" {
		return s
	}
	if os.Geteuid() == 0 {
		return "/run/rvtd/rvtd.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "rvtd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("rvtd-%d.sock", os.Geteuid()))
}
