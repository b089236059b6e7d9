package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// With no link flag each tool runs both sides on the in-memory pair and
// prints the real tools' lines, client first.
func TestCMToolsPair(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rping", "-C2", "-vV", "-S", "30"}, "--- client (rvt0, 198.18.0.1)\n" +
			"ping data: rdma-ping-0: ABCDEFGHIJKLMNOP\nping data: rdma-ping-1: BCDEFGHIJKLMNOPQ\n" +
			"--- server (rvt1, 198.18.0.2)\n" +
			"server ping data: rdma-ping-0: ABCDEFGHIJKLMNOP\nserver ping data: rdma-ping-1: BCDEFGHIJKLMNOPQ\n"},
		{[]string{"ucmatose", "-c", "2", "-C", "3"}, "--- client (rvt0, 198.18.0.1)\ncmatose: starting client\ncmatose: connecting\n" +
			"receiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n" +
			"--- server (rvt1, 198.18.0.2)\ncmatose: starting server\ninitiating data transfers\ncompleting sends\n" +
			"receiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"},
		{[]string{"udaddy", "-c2"}, "--- client (rvt0, 198.18.0.1)\nudaddy: starting client\nudaddy: connecting\n" +
			"initiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n" +
			"--- server (rvt1, 198.18.0.2)\nudaddy: starting server\nreceiving data transfers\nsending replies\n" +
			"data transfers complete\ntest complete\nreturn status 0\n"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append(tc.args, "--timeout", "30s"), &out, &errb), errb.String())
		require.Equal(t, tc.want, out.String())
	}
}

func TestCMToolsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"rping", "-S", "10"},
		{"rping", "-s", "--udp", "127.0.0.1", "-c"},
		{"rping", "--dup", "0.1"},
		{"ucmatose", "-P", "ipoib"},
		{"udaddy", "-p", "0x2"},
		{"rping", "-P", "-C", "1"}, // a persistent server on the pair would never end
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errb), "%v: %s", args, errb.String())
	}
}
