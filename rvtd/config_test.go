package rvtd

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
limits: {qps: 8}
devices:
  - {name: a, fabric: f, ip: 198.18.0.1/24, receive_here: true}
  - {name: b, udp: 127.0.0.1:4791}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Devices) != 2 || c.Limits.QPs != 8 || c.Limits.MRs != DefaultMaxMRs || c.Devices[0].MTU != 9000 ||
		!c.Devices[0].ReceiveHere || c.Devices[1].ReceiveHere {
		t.Fatalf("config %+v", c)
	}
	for _, bad := range []string{
		"devices: [{name: a}]",
		"devices: [{name: a, fabric: f, udp: x, ip: 1.2.3.4}]",
		"devices: [{name: a, fabric: f, ip: 1.2.3.4}, {name: a, fabric: f, ip: 1.2.3.5}]",
		"devcies: []",
		"log: {format: xml}",
		"devices: [{name: a, udp: 127.0.0.1, receive_here: true}]",
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	c, err = ParseConfig(nil)
	if err != nil || len(c.Devices) != 2 || !strings.HasPrefix(c.Devices[1].Name, "rvt1") {
		t.Fatalf("empty config: %v %+v", err, c)
	}
}
