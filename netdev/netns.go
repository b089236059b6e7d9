//go:build linux

package netdev

import "github.com/softverbs/softverbs/netdev/internal/netns"

// InNetns runs f inside the Linux network namespace at path (such as
// /run/netns/NAME, where ip netns keeps them) and returns its error. f
// runs on a fresh OS thread that enters the namespace and ends with f, so
// no other goroutine ever runs there by accident; the file descriptors f
// opens (sockets, TAPs, AF_XDP sockets) stay in the namespace and are
// usable from any goroutine afterwards.
func InNetns(path string, f func() error) error { return netns.Do(path, f) }
