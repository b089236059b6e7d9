package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/syncbuf"
)

// TestMckeyPair: with no link flag rvt mckey runs a receiver on rvt1 and
// a sender on rvt0 in this process and prints mckey's lines, with the
// MGID Linux makes on RoCE v2 (also as a send-only sender). The IPoIB
// port space fails as over Linux on a RoCE port (EINVAL), and -S 0 sends
// nothing, as mckey's create_message has it.
func TestMckeyPair(t *testing.T) {
	side := func(role string) string {
		s := "mckey: starting " + role + "\nmckey: joining\nmckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0\n"
		if role == "client" {
			s += "initiating data transfers\n"
		} else {
			s += "receiving data transfers\n"
		}
		return s + "data transfers complete\ntest complete\nreturn status 0\n"
	}
	want := "--- client (rvt0, 198.18.0.1)\n" + side("client") + "--- server (rvt1, 198.18.0.2)\n" + side("server")
	for _, args := range [][]string{{"mckey"}, {"mckey", "-o", "-C", "3"}, {"mckey", "-S", "1000"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append(args, "--timeout", "30s"), &out, &errb), "%v: %s", args, errb.String())
		require.Equal(t, want, out.String(), "%v", args)
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"mckey", "-S", "0", "--timeout", "30s"}, &out, &errb), errb.String())
	require.NotContains(t, out.String(), "data transfers", "-S 0: no message, nothing sent or received")
	require.Contains(t, out.String(), "return status 0")
	out.Reset()
	errb.Reset()
	require.Equal(t, 1, run([]string{"mckey", "-p", "0x2", "--timeout", "30s"}, &out, &errb), out.String())
	require.Contains(t, errb.String(), "addr bind failure: bind: cm: invalid argument: the IPoIB port space on a RoCE device")
	for _, args := range [][]string{{"mckey", "-m", "ff0e::1"}, {"mckey", "-m", "198.18.0.9"}, {"mckey", "-M", "ff12::1"},
		{"mckey", "-l"}, {"mckey", "-c", "2"}, {"mckey", "-p", "0x106"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errb), "%v: %s", args, errb.String())
	}
}

// TestMckeyThroughRVTD runs a receiver and a sender as processes on the
// daemon's rvt0 and rvt1 (--rvtd): the join is the daemon's
// cm_join_multicast.
func TestMckeyThroughRVTD(t *testing.T) {
	sock := startDaemon(t)
	rx, _ := rvtProcess("mckey", "-m", "239.1.2.7", "-b", "198.18.0.1", "--rvtd", sock, "--ib-dev", "rvt0", "--timeout", "60s")
	rxOut := &syncbuf.Buffer{}
	rx.Stdout, rx.Stderr = rxOut, rxOut
	if err := rx.Start(); err != nil {
		t.Fatal(err)
	}
	defer rx.Process.Kill() // by PID, if it is still running
	// The sender starts once the receiver has joined (it attaches as it
	// joins); a fixed head start may not be enough under load.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(rxOut.String(), "mckey: joined"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver did not join in 30 s:\n%s", rxOut)
		}
	}
	tx, txOut := rvtProcess("mckey", "-m", "239.1.2.7", "-b", "198.18.0.2", "-s", "--rvtd", sock, "--ib-dev", "rvt1", "--timeout", "60s")
	if err := tx.Run(); err != nil {
		t.Fatalf("sender: %v\n%s\nreceiver:\n%s", err, txOut, rxOut)
	}
	if err := rx.Wait(); err != nil {
		t.Fatalf("receiver: %v\n%s", err, rxOut)
	}
	for _, out := range []string{txOut.String(), rxOut.String()} {
		for _, want := range []string{"mckey: joined dgid: ::ffff:239.1.2.7 mlid 0x0 sl 0", "data transfers complete", "return status 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q:\nsender:\n%s\nreceiver:\n%s", want, txOut, rxOut)
			}
		}
	}
}
