//go:build linux

package netns_test

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev/internal/netns"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Ino
}

// TestDoEntersNamespace enters this process's own namespace (no root
// needed) and checks f ran on a thread in it, and that errors carry the
// path and f's error.
func TestDoEntersNamespace(t *testing.T) {
	self := "/proc/self/ns/net"
	want := inode(t, self)
	// f runs on another goroutine, where require cannot stop the test:
	// it reports through its error instead.
	var st unix.Stat_t
	err := netns.Do(self, func() error { return unix.Stat("/proc/thread-self/ns/net", &st) })
	if errors.Is(err, unix.EPERM) {
		t.Skipf("setns needs CAP_SYS_ADMIN here: %v", err)
	}
	require.NoError(t, err)
	require.Equal(t, want, st.Ino)

	boom := errors.New("boom")
	err = netns.Do(self, func() error { return boom })
	require.ErrorIs(t, err, boom)
	require.Contains(t, err.Error(), self)

	err = netns.Do("/nonexistent/netns", func() error { return nil })
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "/nonexistent/netns")
}
