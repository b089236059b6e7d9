package rvt

// HasNeighbourResolver reports whether the port has a neighbour resolver
// (Options.Resolve). Without one, ResolveNeighbour is always false and
// the transport sends to a zero MAC: the connection manager then cannot
// wait for a neighbour and settles addresses without one.
func (d *Device) HasNeighbourResolver() bool { return d.opts.Resolve != nil }
