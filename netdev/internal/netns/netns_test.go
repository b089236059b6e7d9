//go:build linux

package netns_test

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev/internal/netns"
	"github.com/softverbs/softverbs/netdev/nettest"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Ino
}

// TestDoEntersNamespace checks that a missing namespace is reported with
// its path, then (as root) enters a new namespace, other than the test's
// own, and checks f ran on a thread in it and that errors carry the path
// and f's error.
func TestDoEntersNamespace(t *testing.T) {
	err := netns.Do("/nonexistent/netns", func() error { return nil })
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "/nonexistent/netns")

	nettest.RequireRoot(t)
	path := "/run/netns/" + nettest.New(t).Name
	want := inode(t, path)
	// thread-self, not self: /proc/self/ns is the main thread's, and Do's
	// goroutine may run on the main thread, which Go then keeps out of
	// use (a locked thread that exits) in the target namespace.
	self := inode(t, "/proc/thread-self/ns/net")
	require.NotEqual(t, self, want, "the new namespace is not the test's own")
	// f runs on another goroutine, where require cannot stop the test:
	// it reports through its error instead.
	var st unix.Stat_t
	err = netns.Do(path, func() error { return unix.Stat("/proc/thread-self/ns/net", &st) })
	require.NoError(t, err)
	require.Equal(t, want, st.Ino, "f ran in the target namespace")
	require.Equal(t, self, inode(t, "/proc/thread-self/ns/net"), "the test's threads stayed in their own")

	boom := errors.New("boom")
	err = netns.Do(path, func() error { return boom })
	require.ErrorIs(t, err, boom)
	require.Contains(t, err.Error(), path)
}
