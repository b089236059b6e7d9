package dropin_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMckey runs Debian's mckey (rdmacm-utils) through the drop-in
// librdmacm: a receiver bound to rvt0's address joins 239.1.2.x and
// waits for 10 datagrams, a sender bound to rvt1's joins the same group
// (as a full member, and with -o as a send-only one) and sends them to
// QP 0xFFFFFF. Both print the MGID Linux's cma makes on RoCE v2
// (::ffff:239.1.2.x), both exit 0.
func TestMckey(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, "mckey")
	for i, extra := range [][]string{nil, {"-o"}} {
		t.Run(strings.Join(append([]string{"mckey"}, extra...), " "), func(t *testing.T) {
			group := fmt.Sprintf("239.1.2.%d", 10+i)
			rx := start(t, build, sock, 60*time.Second, nil, bin, "-m", group, "-b", cmServerAddr)
			// The receiver posts its receives and attaches its QP as soon
			// as it joins; the sender sends 3 s after its own join (mckey's
			// pause), so a second's head start is ample. (mckey's output
			// is a pipe's, buffered until it exits: nothing to wait on.)
			time.Sleep(time.Second)
			serr, sout := run(t, build, sock, 60*time.Second, bin, append([]string{"-m", group, "-b", cmClientAddr, "-s"}, extra...)...)
			rerr, rout := rx.wait()
			if serr != nil || rerr != nil {
				t.Fatalf("sender %v, receiver %v\nsender:\n%s\nreceiver:\n%s", serr, rerr, sout, rout)
			}
			joined := "mckey: joined dgid: ::ffff:" + group + " mlid 0x0 sl 0"
			for _, side := range []struct{ who, out, first string }{{"sender", sout, "starting client"}, {"receiver", rout, "starting server"}} {
				for _, want := range []string{side.first, joined, "data transfers complete", "test complete", "return status 0"} {
					if !strings.Contains(side.out, want) {
						t.Errorf("%s: no %q:\n%s", side.who, want, side.out)
					}
				}
			}
		})
	}
}
