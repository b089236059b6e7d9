package cm

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// TestTsharkDecodes: Wireshark's InfiniBand dissector names our CM MADs
// and decodes the rdma_cm header of our REQ, from a pcap of a connection
// (REQ, REP, RTU, DREQ, DREP) and a SIDR exchange.
func TestTsharkDecodes(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatalf("running as root (as CI does) without tshark, which scripts/deps.sh installs: %v", err)
		}
		t.Skip("tshark is not installed (scripts/deps.sh installs it, as root)")
	}
	clk := clock.NewManual()
	fab := fabric.New(clk, 1)
	var pcap bytes.Buffer
	var devs [2]*rvt.Device
	var agents [2]*Agent
	var pds [2]*rvt.PD
	for i := range 2 {
		mac := netdev.MAC{2, 0, 0, 0, 0, byte(i + 1)}
		ip := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		fab.AddAddr(ip, mac)
		var link netdev.Link = fab.NewPort(mac, 1500)
		if i == 0 {
			link, err = capture.Wrap(link, clk, &pcap)
			require.NoError(t, err)
		}
		devs[i], err = rvt.Open(rvt.Options{Name: fmt.Sprint("rvt", i), Link: link, MAC: mac,
			Addrs: []netip.Addr{ip}, Resolve: fab.Resolve, Clock: clk, Inline: true})
		require.NoError(t, err)
		defer devs[i].Close()
		agents[i], err = NewAgent(devs[i], FastOptions())
		require.NoError(t, err)
		defer agents[i].Close()
		pds[i], _ = devs[i].AllocPD()
	}
	mkqp := func(i int, typ qp.Type) *rvt.QP {
		c, _ := devs[i].CreateCQ(16, nil)
		q, err := pds[i].CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: c, RecvCQ: c,
			Cap: rvt.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		return q
	}
	w := &world{clk: clk, manual: clk}
	ch := NewEventChannel()
	l := agents[1].NewID(ch, PSTCP, nil)
	require.NoError(t, l.BindAddr(netip.MustParseAddrPort("0.0.0.0:7174")))
	require.NoError(t, l.Listen())
	lu := agents[1].NewID(ch, PSUDP, nil)
	require.NoError(t, lu.BindAddr(netip.MustParseAddrPort("0.0.0.0:7174")))
	require.NoError(t, lu.Listen())
	c := agents[0].NewID(ch, PSTCP, nil)
	require.NoError(t, c.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("198.18.0.2:7174")))
	w.expect(t, ch, EventAddrResolved)
	require.NoError(t, c.Connect(mkqp(0, qp.RC), nil))
	req := w.expect(t, ch, EventConnectRequest)
	require.NoError(t, req.ID.Accept(mkqp(1, qp.RC), nil))
	w.expect(t, ch, EventEstablished)
	w.expect(t, ch, EventEstablished)
	require.NoError(t, c.Disconnect())
	w.expect(t, ch, EventDisconnected)
	require.NoError(t, req.ID.Disconnect())
	u := agents[0].NewID(ch, PSUDP, nil)
	require.NoError(t, u.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("198.18.0.2:7174")))
	for ev := w.waitEvent(t, ch); ev.Type != EventAddrResolved; ev = w.waitEvent(t, ch) {
	}
	require.NoError(t, u.Connect(nil, nil))
	for ev := w.waitEvent(t, ch); ev.Type != EventConnectRequest; ev = w.waitEvent(t, ch) {
	}

	name := filepath.Join(t.TempDir(), "cm.pcap")
	require.NoError(t, os.WriteFile(name, pcap.Bytes(), 0o644))
	var stderr bytes.Buffer
	cmd := exec.Command(tshark, "-n", "-r", name, "-Y", "infiniband.mad", "-T", "fields",
		"-e", "_ws.col.Info", "-e", "infiniband.cm.req.ip_cm.sport", "-e", "infiniband.cm.req.ip_cm.dip4")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	got := strings.TrimSpace(string(out))
	t.Logf("tshark:\n%s", got)
	for _, want := range []string{"ConnectRequest", "ConnectReply", "ReadyToUse", "DisconnectRequest", "DisconnectReply", "ServiceIDResReq"} {
		require.Contains(t, got, want, "%s", got)
	}
	first := strings.Split(strings.Split(got, "\n")[0], "\t")
	require.Len(t, first, 3, "%q", first)
	require.Contains(t, first[0], "ConnectRequest")
	require.Equal(t, fmt.Sprintf("0x%04x", c.LocalAddr().Port()), first[1])
	require.Equal(t, "198.18.0.2", first[2])
}
