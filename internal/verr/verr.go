// Package verr holds the error conditions that several verbs packages
// report (keys, cq, qp, mcast, transport, rvt). Each package re-exports
// the ones it returns under its own name (keys.ErrBusy, rvt.ErrBusy, ...);
// they are the same values, so errors.Is(err, rvt.ErrBusy) holds for a
// key-table error that rvt passes through, as libibverbs reports one errno
// whichever layer refused.
package verr

import "errors"

var (
	// InvalidArgument: a verb was called with arguments it never accepts
	// (EINVAL).
	InvalidArgument = errors.New("invalid argument")
	// InvalidState: the object is not in a state that allows the verb.
	InvalidState = errors.New("invalid state")
	// Busy: the object is still in use (EBUSY).
	Busy = errors.New("resource busy")
	// NoResources: a table or queue limit is reached (ENOMEM/ENOSPC).
	NoResources = errors.New("no resources")
	// NotSupported: the verb or attribute is not implemented (EOPNOTSUPP).
	NotSupported = errors.New("not supported")
)
