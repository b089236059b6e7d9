// Package nettest creates throw-away Linux network namespaces, veth pairs
// and bridges for root-only integration tests, and runs code inside a
// namespace. Everything it makes has a unique name ("sv" + pid + random)
// and is removed by t.Cleanup, also when the test fails.
//
// Tests call RequireRoot first: it skips (with the reason) when not root.
// As root it fails when the ip command is missing (the project's scripts
// install iproute2), and once past it a failure to create a namespace,
// veth or bridge fails the test: CI runs as root on a kernel that has
// them.
package nettest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/softverbs/softverbs/netdev/internal/netns"
)

// RequireRoot skips t unless it runs as root. As root (CI) the test must
// run: RequireRoot fails it if the ip command is missing.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, veth, TAP, eBPF and AF_XDP); CI runs as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("running as root without the ip command (iproute2; the project's scripts install it): %v", err)
	}
}

// Name returns a unique interface or namespace name: "sv", the pid in hex,
// a random suffix and tag, at most 15 bytes.
func Name(tag string) string {
	s := fmt.Sprintf("sv%x%04x%s", os.Getpid()&0xffff, rand.Uint32()&0xffff, tag)
	if len(s) > 15 {
		s = s[:15]
	}
	return s
}

// Netns is a network namespace made by New.
type Netns struct {
	Name string
	t    testing.TB
}

// New creates a network namespace with loopback up and removes it at
// cleanup.
func New(t testing.TB) *Netns {
	t.Helper()
	n := &Netns{Name: Name("n"), t: t}
	Run(t, "ip", "netns", "add", n.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.Name).Run() })
	n.Run("ip", "link", "set", "lo", "up")
	return n
}

// Run runs a command and fails t if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Run runs a command inside the namespace (ip netns exec) and fails the
// test if it fails.
func (n *Netns) Run(name string, args ...string) string {
	n.t.Helper()
	return Run(n.t, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs f on an OS thread inside the namespace and returns its error.
// File descriptors f opens (sockets, a TAP) stay in the namespace and are
// usable from any goroutine afterwards. The thread is discarded after f
// (its goroutine exits while locked), so no other goroutine ever runs in
// the namespace by accident.
func (n *Netns) Do(f func() error) error {
	return netns.Do("/run/netns/"+n.Name, f)
}

// Veth joins a and b with a veth pair and returns the two interface
// names (in a, in b), both up. Deleting a namespace deletes its end, and
// with it the pair.
func Veth(t testing.TB, a, b *Netns) (string, string) {
	t.Helper()
	ea, eb := Name("a"), Name("b")
	Run(t, "ip", "link", "add", ea, "netns", a.Name, "type", "veth", "peer", "name", eb, "netns", b.Name)
	a.Run("ip", "link", "set", ea, "up")
	b.Run("ip", "link", "set", eb, "up")
	return ea, eb
}

// Bridge creates a bridge in n with the given ports (interfaces in n),
// up, with multicast snooping off so the bridge floods group traffic.
func (n *Netns) Bridge(ports ...string) string {
	n.t.Helper()
	br := Name("br")
	n.Run("ip", "link", "add", br, "type", "bridge", "mcast_snooping", "0")
	for _, p := range ports {
		n.Run("ip", "link", "set", p, "master", br)
	}
	n.Run("ip", "link", "set", br, "up")
	return br
}
