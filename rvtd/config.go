package rvtd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/softverbs/softverbs/internal/devopen"
	"go.yaml.in/yaml/v3"
)

// Config is what rvtd serves: its devices and the limits every client
// session gets. It is read from YAML (LoadConfig); the zero Config (no file)
// is DefaultConfig: rvt0 and rvt1 on one in-memory fabric.
type Config struct {
	// Socket is the unix socket clients connect to ("" : DefaultSocket()).
	Socket string `yaml:"socket"`
	// Log configures the structured log ("text" or "json"; "debug", "info",
	// "warn" or "error").
	Log struct {
		Format string `yaml:"format"`
		Level  string `yaml:"level"`
	} `yaml:"log"`
	// Limits are per client session (user_fds: per client user).
	Limits Limits `yaml:"limits"`
	// Devices are opened in order; names must be unique.
	Devices []DeviceConfig `yaml:"devices"`
}

// Limits bound what one client session may hold; 0 is the default.
type Limits struct {
	QPs       int    `yaml:"qps"`        // queue pairs, SRQs included (default 16384)
	MRs       int    `yaml:"mrs"`        // memory regions (default 16384)
	CQEntries int    `yaml:"cq_entries"` // CQ ring entries, summed over the session's CQs (default 1<<20)
	MemBytes  uint64 `yaml:"mem_bytes"`  // shared-memory segment bytes (default 1 GiB)
	CMIDs     int    `yaml:"cm_ids"`     // rdma_cm IDs, passive ones included (default 65536)
	// FDs bounds the daemon's descriptors one session holds (fds.go):
	// its socket, one per device context, completion channel, rdma_cm
	// event channel and QP. 0: a quarter of what RLIMIT_NOFILE leaves
	// after the daemon's own, worked out when the daemon starts.
	FDs int `yaml:"fds"`
	// UserFDs bounds the daemon's descriptors the sessions of one client
	// user (uid) hold together, their sockets and pidfds included
	// (fds.go); root is a user like the others. 0: half of what
	// RLIMIT_NOFILE leaves after the daemon's own (at least limits.fds).
	UserFDs int `yaml:"user_fds"`
}

// DeviceConfig is one device and its link. Exactly one of Fabric, TAP, XDP
// and UDP selects the link.
type DeviceConfig struct {
	Name string `yaml:"name"`
	// Fabric names an in-memory fabric inside rvtd: devices that give the
	// same name share one switch (a test fabric, reachable only through
	// rvtd's clients).
	Fabric string `yaml:"fabric"`
	TAP    string `yaml:"tap"` // create and own this TAP device (root)
	XDP    string `yaml:"xdp"` // attach AF_XDP to this interface (root)
	UDP    string `yaml:"udp"` // the unprivileged UDP link: IP or IP:port
	// IP is the device's address (ADDR/PFX or ADDR) on a fabric, TAP or
	// XDP link.
	IP string `yaml:"ip"`
	// Gateway is a TAP device's default gateway (softverbs is the host on
	// a TAP, with its own routing table: the subnet of IP on-link, any
	// other destination through Gateway; without one, a destination off
	// the subnet is unreachable: rdma_resolve_addr fails with
	// ENETUNREACH, as on Linux). A fabric has no router; XDP and UDP
	// devices follow the kernel's routing table.
	Gateway string `yaml:"gateway"`
	MAC     string `yaml:"mac"` // default: random, locally administered
	// MTU is the link's Ethernet MTU (0: the interface's; a fabric port
	// 9000, a TAP enough for a 4096-byte path MTU).
	MTU int `yaml:"mtu"`
	// ReceiveHere (fabric devices): between two devices that both have
	// it, a packet whose run sent only that one is handled by the
	// goroutine that sent it, not handed to a worker
	// (rvt.Options.ReceiveHere): shorter round trips, lower message rates
	// with many QPs.
	ReceiveHere bool `yaml:"receive_here"`
}

// Defaults of Limits: room for programs that work at scale (cmtime's
// thousands of connections, an MPI job's QP per peer), while one session
// cannot take a device's QP numbers (65536) or keys (65535) from the
// others. An rdma_cm ID is a few hundred bytes in the daemon; the kernel's
// ucma has no limit of its own.
const (
	DefaultMaxQPs       = 16384
	DefaultMaxMRs       = 16384
	DefaultMaxCQEntries = 1 << 20
	DefaultMaxMemBytes  = 1 << 30
	DefaultMaxCMIDs     = 1 << 16
)

// DefaultConfig is what rvtd serves with no configuration file: rvt0 and
// rvt1 on one in-memory fabric, 198.18.0.1 and 198.18.0.2, no root needed.
func DefaultConfig() *Config {
	c := &Config{Devices: []DeviceConfig{
		{Name: "rvt0", Fabric: "fabric0", IP: "198.18.0.1/24", MAC: "02:00:5e:00:00:01", ReceiveHere: true},
		{Name: "rvt1", Fabric: "fabric0", IP: "198.18.0.2/24", MAC: "02:00:5e:00:00:02", ReceiveHere: true},
	}}
	c.fill()
	return c
}

// LoadConfig reads a YAML configuration from path. Unknown keys are
// errors, so a misspelt option does not pass silently.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a YAML configuration and checks it.
func ParseConfig(b []byte) (*Config, error) {
	c := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(c.Devices) == 0 {
		c.Devices = DefaultConfig().Devices
	}
	c.fill()
	if err := c.Check(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) fill() {
	l := &c.Limits
	if l.QPs == 0 {
		l.QPs = DefaultMaxQPs
	}
	if l.MRs == 0 {
		l.MRs = DefaultMaxMRs
	}
	if l.CQEntries == 0 {
		l.CQEntries = DefaultMaxCQEntries
	}
	if l.MemBytes == 0 {
		l.MemBytes = DefaultMaxMemBytes
	}
	if l.CMIDs == 0 {
		l.CMIDs = DefaultMaxCMIDs
	}
	for i := range c.Devices {
		d := &c.Devices[i]
		if d.Fabric != "" && d.MTU == 0 {
			d.MTU = 9000
		}
	}
}

// Check reports the first thing wrong with c that can be known without
// opening anything.
func (c *Config) Check() error {
	switch c.Log.Format {
	case "", "text", "json":
	default:
		return fmt.Errorf("log.format %q: want text or json", c.Log.Format)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level %q: want debug, info, warn or error", c.Log.Level)
	}
	if c.Limits.QPs < 0 || c.Limits.MRs < 0 || c.Limits.CQEntries < 0 || c.Limits.CMIDs < 0 || c.Limits.FDs < 0 || c.Limits.UserFDs < 0 {
		return errors.New("limits must not be negative")
	}
	if c.Limits.FDs != 0 && c.Limits.FDs < MinFDLimit {
		return fmt.Errorf("limits.fds %d: want 0 (the default) or at least %d (a session's socket and pidfd, a device context, a QP)", c.Limits.FDs, MinFDLimit)
	}
	if c.Limits.UserFDs != 0 && c.Limits.UserFDs < max(c.Limits.FDs, MinFDLimit) {
		return fmt.Errorf("limits.user_fds %d: want 0 (the default) or at least limits.fds and %d", c.Limits.UserFDs, MinFDLimit)
	}
	seen := map[string]bool{}
	fabricIPs := map[string]string{} // "fabric addr": the device that has it
	for i, d := range c.Devices {
		if d.Name == "" || len(d.Name) > 63 {
			return fmt.Errorf("device %d: name %q: want 1 to 63 bytes", i, d.Name)
		}
		if seen[d.Name] {
			return fmt.Errorf("device %q: named twice", d.Name)
		}
		seen[d.Name] = true
		n := 0
		for _, s := range []string{d.Fabric, d.TAP, d.XDP, d.UDP} {
			if s != "" {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("device %q: give exactly one of fabric, tap, xdp and udp", d.Name)
		}
		if d.ReceiveHere && d.Fabric == "" {
			return fmt.Errorf("device %q: receive_here is for fabric devices", d.Name)
		}
		if (d.Fabric != "" || d.TAP != "") && d.IP == "" {
			return fmt.Errorf("device %q: a fabric or TAP link needs ip", d.Name)
		}
		if d.MTU < 0 || d.MTU > 65535 {
			return fmt.Errorf("device %q: mtu %d", d.Name, d.MTU)
		}
		if d.UDP != "" && d.IP != "" {
			return fmt.Errorf("device %q: ip is for fabric, tap and xdp devices (a udp device's address is its udp)", d.Name)
		}
		if d.Gateway != "" && d.TAP == "" {
			return fmt.Errorf("device %q: gateway is for tap devices (a fabric has no router; xdp and udp devices use the kernel's routes)", d.Name)
		}
		lc := devopen.Config{UDP: d.UDP, IP: d.IP, Gateway: d.Gateway, MAC: d.MAC, LinkMTU: d.MTU}
		if err := lc.CheckAddrs(); err != nil {
			return fmt.Errorf("device %q: %w", d.Name, err)
		}
		if d.Fabric != "" {
			pfx, _ := devopen.ParsePrefix(d.IP) // checked just above
			k := d.Fabric + " " + pfx.Addr().String()
			if other, dup := fabricIPs[k]; dup {
				return fmt.Errorf("device %q: ip %s is device %q's on fabric %q", d.Name, pfx.Addr(), other, d.Fabric)
			}
			fabricIPs[k] = d.Name
		}
	}
	return nil
}
