package devopen

import (
	"errors"
	"fmt"
	"time"

	"github.com/softverbs/softverbs/rvt"
)

// openRVTD is Open for a device of rvtd: nothing to open here, and the
// flags that shape a link of this process are refused (the daemon owns
// the port: its configuration chooses the link).
func openRVTD(cfg Config) (*Link, error) {
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"--tap", cfg.TAP != ""}, {"--xdp", cfg.XDP != ""}, {"--udp", cfg.UDP != ""}, {"--ip", cfg.IP != ""},
		{"--mac", cfg.MAC != ""}, {"--pcap", cfg.PCAP != ""}, {"--link-mtu", cfg.LinkMTU != 0},
		{"--loss", cfg.Loss != 0}, {"--dup", cfg.Dup != 0}, {"--reorder", cfg.Reorder != 0},
		{"--delay", cfg.Delay != time.Duration(0)},
	} {
		if f.set {
			return nil, fmt.Errorf("--rvtd and %s: the daemon owns the device's link (its configuration chooses it)", f.name)
		}
	}
	if cfg.Fabric != nil {
		return nil, errors.New("--rvtd: a device of rvtd has no port of this process's fabric")
	}
	return &Link{RVTD: cfg.RVTD}, nil
}

// OpenDevice opens device name on l: rvt.Open(l.Options(name)), or, for
// a link of rvtd (Config.RVTD), rvt.Dial of the daemon's device name.
// The one switch by which every tool runs through the daemon.
func (l *Link) OpenDevice(name string) (*rvt.Device, error) {
	if l.RVTD != "" {
		return rvt.Dial(l.RVTD, name)
	}
	return rvt.Open(l.Options(name))
}
