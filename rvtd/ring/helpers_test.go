package ring

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func fcntlSeals(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0) }

func dupFD(t *testing.T, fd int) int {
	d, err := unix.Dup(fd)
	require.NoError(t, err)
	return d
}

func plainMemfd(t *testing.T, size int) int {
	fd, err := unix.MemfdCreate("plain", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	require.NoError(t, unix.Ftruncate(fd, int64(size)))
	return fd
}
