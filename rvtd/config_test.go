package rvtd

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
limits: {qps: 8, fds: 100}
devices:
  - {name: a, fabric: f, ip: 198.18.0.1/24, receive_here: true}
  - {name: b, udp: 127.0.0.1:4791}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Devices) != 2 || c.Limits.QPs != 8 || c.Limits.MRs != DefaultMaxMRs || c.Limits.FDs != 100 || c.Devices[0].MTU != 9000 ||
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
	// What opening would refuse, found by the check (rvtd --check-config,
	// which rvtd.service runs first) rather than at start.
	for bad, want := range map[string]string{
		"devices: [{name: a, fabric: f, ip: notanip}]":                                      `--ip "notanip"`,
		"devices: [{name: a, fabric: f, ip: 224.0.0.1}]":                                    "not a unicast address",
		"devices: [{name: a, fabric: f, ip: 198.18.0.1, mac: 'zz:zz'}]":                     `--mac "zz:zz"`,
		"devices: [{name: a, udp: not an addr}]":                                            "want IP or IP:port",
		"devices: [{name: a, udp: '127.0.0.1:14791'}]":                                      "port 4791",
		"devices: [{name: a, udp: 127.0.0.1, ip: 10.0.0.1/24}]":                             "ip is for fabric, tap and xdp devices",
		"devices: [{name: a, fabric: f, ip: 198.18.0.1, mtu: 1}]":                           "link MTU 1 too small",
		"devices: [{name: a, fabric: f, ip: 10.0.0.1}, {name: b, fabric: f, ip: 10.0.0.1}]": `ip 10.0.0.1 is device "a"'s on fabric "f"`,
		"limits: {fds: -1}": "must not be negative",
		"limits: {fds: 3}":  "limits.fds 3: want 0 (the default) or at least 8",
	} {
		_, err := ParseConfig([]byte(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", bad, err, want)
		}
	}
	// The same address on two fabrics is two networks.
	if _, err := ParseConfig([]byte("devices: [{name: a, fabric: f, ip: 10.0.0.1}, {name: b, fabric: g, ip: 10.0.0.1}]")); err != nil {
		t.Errorf("one address on two fabrics: %v", err)
	}
	c, err = ParseConfig(nil)
	if err != nil || len(c.Devices) != 2 || !strings.HasPrefix(c.Devices[1].Name, "rvt1") {
		t.Fatalf("empty config: %v %+v", err, c)
	}
}
