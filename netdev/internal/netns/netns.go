//go:build linux

// Package netns runs code inside a Linux network namespace.
//
// A namespace is a property of an OS thread, so f runs on a goroutine
// locked to a fresh thread that enters the namespace; that goroutine exits
// still locked, so the runtime ends the thread instead of reusing it, and
// no other goroutine ever runs in the namespace by accident. File
// descriptors f opens (sockets, TAPs, AF_XDP sockets) stay in the
// namespace and are usable from any goroutine afterwards.
package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f inside the network namespace at path (such as
// /run/netns/NAME, where ip netns keeps them) and returns its error.
func Do(path string, f func() error) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := DoFD(fd, f); err != nil {
		return fmt.Errorf("in network namespace %s: %w", path, err)
	}
	return nil
}

// DoFD runs f inside the network namespace open as fd and returns its
// error.
func DoFD(fd int, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		done <- f()
	}()
	return <-done
}
