package rvt

import "github.com/softverbs/softverbs/rvtd/client"

// Remote is the rvtd device behind d (a device from Dial), or nil for an
// embedded device. Higher layers (the connection manager) use it to reach
// the daemon's services for the device.
func (d *Device) Remote() *client.Device { return d.remote }

// RemoteHandle is the QP's handle in its rvtd session, or 0 for a QP of an
// embedded device.
func (q *QP) RemoteHandle() uint32 { return q.rhandle }
