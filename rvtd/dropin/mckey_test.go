package dropin_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMckey runs Debian's mckey (rdmacm-utils) through the drop-in
// librdmacm: a receiver bound to rvt0's address joins 239.1.2.x and
// waits for 10 datagrams, a sender bound to rvt1's joins the same group
// (as a full member, and with -o as a send-only one) and sends them to
// QP 0xFFFFFF. Both print the MGID Linux's cma makes on RoCE v2
// (::ffff:239.1.2.x), both exit 0. In the IPoIB port space (-p 0x2) both
// fail to bind with EINVAL, as over rxe: Linux's cma refuses
// RDMA_PS_IPOIB on a RoCE port.
func TestMckey(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	for i, tc := range []struct{ both, sender []string }{{nil, nil}, {nil, []string{"-o"}}} {
		t.Run(strings.Join(append(append([]string{"mckey"}, tc.both...), tc.sender...), " "), func(t *testing.T) {
			mckeyPair(t, build, sock, nil, fmt.Sprintf("239.1.2.%d", 10+i), tc.both, tc.sender)
		})
	}
	t.Run("mckey -p 0x2", func(t *testing.T) {
		bin := tool(t, "mckey")
		for _, args := range [][]string{{"-b", cmServerAddr}, {"-b", cmClientAddr, "-s"}} {
			err, out := start(t, build, sock, 30*time.Second, nil, bin, append([]string{"-m", "239.1.2.12", "-p", "0x2"}, args...)...).wait()
			if err == nil || !strings.Contains(out, "mckey: addr bind failure: Invalid argument") || strings.Contains(out, "joined dgid") {
				t.Errorf("mckey -p 0x2 %v: %v, want rxe's bind failure (EINVAL):\n%s", args, err, out)
			}
		}
	})
}

// TestMckeyASan is TestMckey's first case with both libraries built with
// AddressSanitizer and UBSan (as TestRdmacmASan).
func TestMckeyASan(t *testing.T) {
	build := rdmacmLib(t)
	sout, rout := mckeyPair(t, filepath.Join(build, "asan"), startDaemon(t), sanitizerEnv(t), "239.1.2.20", nil, nil)
	for _, out := range []string{sout, rout} {
		if bad := sanitizerReport(out); bad != "" {
			t.Fatalf("%s\nsender:\n%s\nreceiver:\n%s", bad, sout, rout)
		}
	}
}

// mckeyPair runs a receiver and a sender of group and checks both
// outputs; it returns them.
func mckeyPair(t *testing.T, build, sock string, env []string, group string, both, extra []string) (string, string) {
	t.Helper()
	bin := tool(t, "mckey")
	// The receiver's output line by line (stdbuf: mckey's stdout is a
	// pipe, else buffered until it exits), so that the sender starts only
	// once the receiver has joined: it has then posted its receives, and
	// the library has attached its QP to the group. (A fixed head start
	// of a second was not always enough under CI's load: the datagrams
	// went out before the receiver's join and were not for it.)
	rx := start(t, build, sock, 60*time.Second, env, "stdbuf", append([]string{"-oL", bin, "-m", group, "-b", cmServerAddr}, both...)...)
	joined := "mckey: joined dgid: ::ffff:" + group + " mlid 0x0 sl 0"
	rx.waitOutput(t, joined, 30*time.Second)
	serr, sout := start(t, build, sock, 60*time.Second, env, bin, append(append([]string{"-m", group, "-b", cmClientAddr, "-s"}, both...), extra...)...).wait()
	rerr, rout := rx.wait()
	if serr != nil || rerr != nil {
		t.Fatalf("sender %v, receiver %v\nsender:\n%s\nreceiver:\n%s", serr, rerr, sout, rout)
	}
	for _, side := range []struct{ who, out, first string }{{"sender", sout, "starting client"}, {"receiver", rout, "starting server"}} {
		for _, want := range []string{side.first, joined, "data transfers complete", "test complete", "return status 0"} {
			if !strings.Contains(side.out, want) {
				t.Errorf("%s: no %q:\n%s", side.who, want, side.out)
			}
		}
	}
	return sout, rout
}
