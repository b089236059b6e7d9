//go:build !linux

package netdev

import (
	"errors"
	"fmt"
	"net/netip"
)

// WatchAddrs follows an interface's addresses over rtnetlink, which only
// Linux has; elsewhere it fails with an error wrapping errors.ErrUnsupported.
func WatchAddrs(ifname string, fn func([]netip.Addr)) (stop func(), err error) {
	return nil, fmt.Errorf("watch addresses of %s: %w (needs Linux rtnetlink)", ifname, errors.ErrUnsupported)
}
