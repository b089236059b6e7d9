package rvtd_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/softverbs/softverbs/rvtd/client"
)

// TestMetrics scrapes an in-process daemon with two connected sessions
// and checks the engine counters, the QP census, the per-client objects
// and a ring's depth.
func TestMetrics(t *testing.T) {
	srv, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	// One SEND from a to b: packets on both devices.
	if err := b.qp.PostRecv(1, client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(client.SendWR{WRID: 2, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: a.mr.Addr, Length: 100, LKey: a.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.poll(1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.poll(1); err != nil {
		t.Fatal(err)
	}
	// Three receives left posted on b's ring.
	for i := 0; i < 3; i++ {
		if err := b.qp.PostRecv(uint64(10+i), client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	if err := srv.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("gather: %d metrics, %v", n, err)
	}
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	scrape := func() string {
		r, err := ts.Client().Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}

	// The data path hands the receives to the engine on its own time.
	inEngine := fmt.Sprintf(`rvtd_qp_ring_in_engine{device="rvt1",qpn="%d",ring="recv",session="2"} 3`, b.qp.QPN)
	waitFor(t, "receives in the engine", func() bool { return strings.Contains(scrape(), "\n"+inEngine+"\n") })

	comm, _ := os.ReadFile("/proc/self/comm")
	pid, cm := os.Getpid(), strings.TrimSpace(string(comm))
	body := scrape()
	for _, want := range []string{
		"rvtd_clients 2",
		"rvtd_sessions_total 2",
		"rvtd_protocol_errors_total 0",
		`rvtd_qps{device="rvt0",state="RTS",type="RC"} 1`,
		`rvtd_qps{device="rvt1",state="RTS",type="RC"} 1`,
		`rvtd_qps{device="rvt0",state="RESET",type="RC"} 0`,
		`rvtd_port_drops_total{device="rvt0",port="1",reason="bad_icrc"} 0`,
		fmt.Sprintf(`rvtd_client_objects{comm=%q,kind="qp",pid="%d",session="1"} 1`, cm, pid),
		fmt.Sprintf(`rvtd_client_objects{comm=%q,kind="mr",pid="%d",session="1"} 1`, cm, pid),
		fmt.Sprintf(`rvtd_client_objects{comm=%q,kind="cq",pid="%d",session="2"} 1`, cm, pid),
		fmt.Sprintf(`rvtd_client_objects{comm=%q,kind="pd",pid="%d",session="2"} 1`, cm, pid),
		fmt.Sprintf(`rvtd_client_objects{comm=%q,kind="mw",pid="%d",session="2"} 0`, cm, pid),
		fmt.Sprintf(`rvtd_client_shm_bytes{comm=%q,pid="%d",session="1"} %s`, cm, pid, strconv.FormatFloat(shmSize, 'g', -1, 64)),
		// The session's socket, its client's /proc/<pid>/mem and pidfd,
		// the device context's async socket and the QP's doorbell (the
		// memfds are passed and closed: the daemon keeps its mappings).
		fmt.Sprintf(`rvtd_client_descriptors{comm=%q,pid="%d",session="1"} 5`, cm, pid),
		fmt.Sprintf(`rvtd_client_descriptors_limit %d`, srv.FDLimit()),
		fmt.Sprintf(`rvtd_qp_ring_entries{device="rvt0",qpn="%d",ring="send",session="1"} 64`, a.qp.QPN),
		fmt.Sprintf(`rvtd_qp_ring_depth{device="rvt0",qpn="%d",ring="send",session="1"} 0`, a.qp.QPN),
		fmt.Sprintf(`rvtd_qp_ring_depth{device="rvt1",qpn="%d",ring="recv",session="2"} 3`, b.qp.QPN),
	} {
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("no line %q", want)
		}
	}
	// The engine's counters, as Device.Counters has them.
	for _, dev := range []string{"rvt0", "rvt1"} {
		m := srv.Device(dev).Counters()
		for _, name := range []string{"sent_pkts", "rcvd_pkts", "retransmits", "rcvd_rnr_err"} {
			if m[name] == 0 && strings.Contains(name, "pkts") {
				t.Errorf("%s %s is 0 after a SEND", dev, name)
			}
			// Every counter is there, zero or not (Counters leaves zeros out).
			line := fmt.Sprintf(`rvtd_port_%s_total{device=%q,port="1"} `, name, dev)
			if !strings.Contains(body, "\n"+line) {
				t.Errorf("no line %q", line)
			}
		}
	}
	if t.Failed() {
		t.Log(body)
	}

	// A session that ends leaves the metrics at the next scrape.
	a.c.Close()
	waitFor(t, "session end", func() bool { return srv.Sessions() == 1 })
	body = scrape()
	if !strings.Contains(body, "\nrvtd_clients 1\n") || strings.Contains(body, `session="1"`) {
		t.Errorf("after a's session ended:\n%s", body)
	}
	if !strings.Contains(body, "\n"+`rvtd_qps{device="rvt0",state="RTS",type="RC"} 0`+"\n") {
		t.Errorf("a's QP still counted")
	}
}
