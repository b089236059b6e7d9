package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// PortSpace is an rdma_cm port space (rdma_port_space).
type PortSpace uint16

// Port spaces.
const (
	PSIPoIB PortSpace = 0x0002
	PSTCP   PortSpace = 0x0106
	PSUDP   PortSpace = 0x0111
	PSIB    PortSpace = 0x013F
)

func (ps PortSpace) String() string {
	switch ps {
	case PSIPoIB:
		return "IPOIB"
	case PSTCP:
		return "TCP"
	case PSUDP:
		return "UDP"
	case PSIB:
		return "IB"
	}
	return fmt.Sprintf("PortSpace(%#04x)", uint16(ps))
}

// UDPQKey is the Q_Key of RDMA_PS_UDP and RDMA_PS_IB UD QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// ServiceID is an IB service ID; rdma_cm's are port space << 16 | port
// under the IETF prefix 0x0000000001.
type ServiceID uint64

// MakeServiceID returns the rdma_cm service ID of a port in a port space.
func MakeServiceID(ps PortSpace, port uint16) ServiceID {
	return ServiceID(uint64(ps)<<16 | uint64(port))
}

// PortSpace returns the port space of an rdma_cm service ID.
func (s ServiceID) PortSpace() PortSpace { return PortSpace(s >> 16) }

// Port returns the port of an rdma_cm service ID.
func (s ServiceID) Port() uint16 { return uint16(s) }

// IsRDMACM reports whether the ID lies in rdma_cm's IP range.
func (s ServiceID) IsRDMACM() bool { return s>>32 == 0 && s>>24 == 1 }

func (s ServiceID) String() string { return fmt.Sprintf("%#016x", uint64(s)) }

// CMAHeaderLen is the size of rdma_cm's header in REQ and SIDR_REQ private
// data (struct cma_hdr).
const CMAHeaderLen = 36

// User private data limits of rdma_cm (after the header in REQ/SIDR_REQ).
const (
	MaxConnPrivateData = REQPrivateDataLen - CMAHeaderLen     // 56
	MaxUDPrivateData   = SIDRREQPrivateDataLen - CMAHeaderLen // 180
)

// CMAHeader is a view of struct cma_hdr:
//
//	byte 0     cma_version (0)
//	byte 1     IP version in bits 7:4
//	bytes 2-3  source port
//	bytes 4-19 source IP (IPv4: 12 zero bytes then the address)
//	bytes 20-35 destination IP
type CMAHeader []byte

// ErrBadCMAHeader reports a cma_hdr the passive side refuses.
var ErrBadCMAHeader = errors.New("cm: bad rdma_cm header (version or IP version)")

func (h CMAHeader) Version() uint8      { return h[0] }
func (h CMAHeader) IPVersion() uint8    { return h[1] >> 4 }
func (h CMAHeader) SrcPort() uint16     { return binary.BigEndian.Uint16(h[2:]) }
func (h CMAHeader) SrcAddr() netip.Addr { return cmaAddr(h[4:20], h.IPVersion()) }
func (h CMAHeader) DstAddr() netip.Addr { return cmaAddr(h[20:36], h.IPVersion()) }

// Src and Dst return the addresses with ports (the destination port is the
// service ID's, given by the caller).
func (h CMAHeader) Src() netip.AddrPort { return netip.AddrPortFrom(h.SrcAddr(), h.SrcPort()) }

// Check validates version and IP version, as cma_check_req_qp_type and
// cma_get_net_info do.
func (h CMAHeader) Check() error {
	if len(h) < CMAHeaderLen || h.Version() != 0 || (h.IPVersion() != 4 && h.IPVersion() != 6) {
		return ErrBadCMAHeader
	}
	return nil
}

// Set writes a header for src -> dst (both IPv4 or both IPv6).
func (h CMAHeader) Set(src netip.AddrPort, dst netip.Addr) {
	clear(h[:CMAHeaderLen])
	h[0] = 0
	if src.Addr().Unmap().Is4() {
		h[1] = 4 << 4
	} else {
		h[1] = 6 << 4
	}
	binary.BigEndian.PutUint16(h[2:], src.Port())
	putCMAAddr(h[4:20], src.Addr())
	putCMAAddr(h[20:36], dst)
}

func cmaAddr(b []byte, ver uint8) netip.Addr {
	if ver == 4 {
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return netip.AddrFrom16([16]byte(b[:16]))
}

func putCMAAddr(b []byte, a netip.Addr) {
	a = a.Unmap()
	if a.Is4() {
		v := a.As4()
		clear(b[:12])
		copy(b[12:16], v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}
