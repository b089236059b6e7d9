// Package verr holds the error conditions that several verbs packages
// report (keys, cq, qp, mcast, transport, rvt). Each package re-exports
// the ones it returns under its own name (keys.ErrBusy, rvt.ErrBusy, ...);
// they are the same values, so errors.Is(err, rvt.ErrBusy) holds for a
// key-table error that rvt passes through, as libibverbs reports one errno
// whichever layer refused.
package verr

import "errors"

var (
	// ErrInvalidArgument: a verb was called with arguments it never accepts
	// (EINVAL).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidState: the object is not in a state that allows the verb.
	ErrInvalidState = errors.New("invalid state")
	// ErrBusy: the object is still in use (EBUSY).
	ErrBusy = errors.New("resource busy")
	// ErrNoResources: a table or queue limit is reached (ENOMEM/ENOSPC).
	ErrNoResources = errors.New("no resources")
	// ErrNotSupported: the verb or attribute is not implemented (EOPNOTSUPP).
	ErrNotSupported = errors.New("not supported")
	// ErrClosed: the device is closed (a removed device's EIO).
	ErrClosed = errors.New("device closed")
)
