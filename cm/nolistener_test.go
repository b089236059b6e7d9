package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestRejectErrorNoListener: a rejection that means "nobody listens" (REJ
// 8 for a REQ, SIDR status UNSUPPORTED) matches ErrNoListener; no other
// rejection does.
func TestRejectErrorNoListener(t *testing.T) {
	tests := []struct {
		name string
		err  *RejectError
		want bool
	}{
		{"REJ 8", &RejectError{Reason: RejInvalidServiceID}, true},
		{"SIDR UNSUPPORTED", SIDRRejectError(SIDRUnsupported, nil), true},
		{"consumer", &RejectError{Reason: RejConsumerDefined, PrivateData: []byte("no")}, false},
		{"SIDR REJECT", SIDRRejectError(SIDRReject, nil), false},
		{"SIDR NO_QP", SIDRRejectError(SIDRNoQP, nil), false},
		{"stale", &RejectError{Reason: RejStaleConn}, false},
		{"timeout", &RejectError{Reason: RejTimeout}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("dial: %w", tt.err)
			require.Equal(t, tt.want, errors.Is(err, ErrNoListener))
			require.ErrorIs(t, err, ErrRejected)
			require.ErrorIs(t, err, tt.err.Reason)
		})
	}
}

// TestNoListenerErrors: Dial (a REQ) and ResolveUD (a SIDR_REQ) to a port
// nobody listens on fail with an error that is ErrNoListener, as the doc
// of ErrNoListener says, and still a *RejectError with reason 8.
func TestNoListenerErrors(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 31})
	a, b := w.nodes[0], w.nodes[1]
	tests := []struct {
		name string
		try  func() error
	}{
		{"REQ", func() error {
			_, err := Dial(ctxT(t), a.dev, netip.AddrPortFrom(b.ip, 4001), a.newQP(t, qp.RC), nil)
			return err
		}},
		{"SIDR_REQ", func() error {
			_, err := ResolveUD(ctxT(t), a.dev, a.pd, netip.AddrPortFrom(b.ip, 4002), nil)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.try()
			require.ErrorIs(t, err, ErrNoListener)
			require.ErrorIs(t, err, RejInvalidServiceID)
			var re *RejectError
			require.ErrorAs(t, err, &re)
		})
	}
}
