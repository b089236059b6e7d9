package cm

import (
	"errors"
	"fmt"
)

// Management class constants (IBTA 13.4; Linux ib_mad.h, ib_cm.h).
const (
	BaseVersion     = 1
	MgmtClassCM     = 0x07
	CMClassVersion  = 2
	QP1QKey         = 0x80010000 // Q_Key of QP1 (IB_QP1_QKEY)
	DefaultPKey     = 0xFFFF
	statusUnsupAttr = 0x000C // unsupported method/attribute combination (mad.c)
)

// Method is a MAD method.
type Method uint8

// MAD methods used on the CM class.
const (
	MethodGet     Method = 0x01
	MethodSet     Method = 0x02
	MethodSend    Method = 0x03
	MethodGetResp Method = 0x81
)

func (m Method) String() string {
	switch m {
	case MethodGet:
		return "Get"
	case MethodSet:
		return "Set"
	case MethodSend:
		return "Send"
	case MethodGetResp:
		return "GetResp"
	}
	return fmt.Sprintf("Method(%#x)", uint8(m))
}

// AttrID is a CM attribute ID (Linux ib_cm.h).
type AttrID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ",
	AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ",
	AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// Errors of ParseMAD.
var (
	ErrShortMAD  = errors.New("cm: MAD shorter than 256 bytes")
	ErrNotCM     = errors.New("cm: not a CM MAD (base version, class or class version)")
	ErrUnknownID = errors.New("cm: unknown CM attribute")
)

// MAD is a view over a 256-byte CM MAD: the common header and the data.
// Use ParseMAD to validate one before reading it.
type MAD []byte

// ParseMAD checks that b holds a CM MAD (base version 1, class 0x07, class
// version 2) and returns a view of its first 256 bytes. An attribute the
// package has no layout for is ErrUnknownID (the view is still returned,
// so that a GET can be answered).
func ParseMAD(b []byte) (MAD, error) {
	if len(b) < MADLen {
		return nil, ErrShortMAD
	}
	m := MAD(b[:MADLen:MADLen])
	if m.BaseVersion() != BaseVersion || m.MgmtClass() != MgmtClassCM || m.ClassVersion() != CMClassVersion {
		return m, ErrNotCM
	}
	if _, ok := LayoutOf(m.AttrID()); !ok {
		return m, ErrUnknownID
	}
	return m, nil
}

// InitHeader writes a CM MAD header for attribute id with the given method
// and transaction ID and clears the rest of the MAD.
func (m MAD) InitHeader(method Method, id AttrID, tid uint64) {
	clear(m[:MADLen])
	hdrBaseVersion.Set(m, BaseVersion)
	hdrMgmtClass.Set(m, MgmtClassCM)
	hdrClassVersion.Set(m, CMClassVersion)
	hdrMethod.Set(m, uint64(method))
	hdrTID.Set(m, tid)
	hdrAttrID.Set(m, uint64(id))
}

func (m MAD) BaseVersion() uint8       { return uint8(hdrBaseVersion.Get(m)) }
func (m MAD) MgmtClass() uint8         { return uint8(hdrMgmtClass.Get(m)) }
func (m MAD) ClassVersion() uint8      { return uint8(hdrClassVersion.Get(m)) }
func (m MAD) Method() Method           { return Method(hdrMethod.Get(m)) }
func (m MAD) Status() uint16           { return uint16(hdrStatus.Get(m)) }
func (m MAD) TID() uint64              { return hdrTID.Get(m) }
func (m MAD) AttrID() AttrID           { return AttrID(hdrAttrID.Get(m)) }
func (m MAD) AttrMod() uint32          { return uint32(hdrAttrMod.Get(m)) }
func (m MAD) SetMethod(v Method)       { hdrMethod.Set(m, uint64(v)) }
func (m MAD) SetStatus(v uint16)       { hdrStatus.Set(m, uint64(v)) }
func (m MAD) SetTID(v uint64)          { hdrTID.Set(m, v) }
func (m MAD) SetAttrMod(v uint32)      { hdrAttrMod.Set(m, uint64(v)) }
func (m MAD) Data() []byte             { return m[MADHeaderLen:MADLen] }
func (m MAD) get(fd Field) uint64      { return fd.Get(m) }
func (m MAD) set(fd Field, v uint64)   { fd.Set(m, v) }
func (m MAD) bytes(fd Field) []byte    { return fd.Bytes(m) }
func (m MAD) put(fd Field, b []byte)   { clear(fd.Bytes(m)); copy(fd.Bytes(m), b) }
func (m MAD) flag(fd Field) bool       { return fd.Get(m) != 0 }
func (m MAD) setFlag(fd Field, v bool) { fd.Set(m, b2u(v)) }

func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// Fields returns the value of every field of the MAD's header and
// attribute layout, in layout order (byte fields as nil numbers); Encode
// writes them back. Together they prove the layouts cover every bit a
// peer sets (the golden test re-encodes captures).
func (m MAD) Fields() []FieldValue {
	var out []FieldValue
	add := func(fd Field) {
		if fd.IsBytes() {
			out = append(out, FieldValue{Field: fd, Bytes: append([]byte(nil), fd.Bytes(m)...)})
		} else {
			out = append(out, FieldValue{Field: fd, Value: fd.Get(m)})
		}
	}
	for _, fd := range headerLayout {
		add(fd)
	}
	if l, ok := LayoutOf(m.AttrID()); ok {
		for _, fd := range l.Fields {
			add(fd)
		}
	}
	return out
}

// FieldValue is one decoded field.
type FieldValue struct {
	Field
	Value uint64
	Bytes []byte
}

// Encode writes the field values into a fresh 256-byte MAD.
func Encode(vals []FieldValue) MAD {
	m := make(MAD, MADLen)
	for _, v := range vals {
		if v.IsBytes() {
			copy(v.Field.Bytes(m), v.Bytes)
		} else {
			v.Set(m, v.Value)
		}
	}
	return m
}

// Views of each attribute: a MAD whose AttrID is that attribute.
type (
	REQ           MAD
	MRA           MAD
	REJ           MAD
	REP           MAD
	RTU           MAD
	DREQ          MAD
	DREP          MAD
	SIDRREQ       MAD
	SIDRREP       MAD
	LAP           MAD
	ClassPortInfo MAD
)

// REQ accessors.
func (m REQ) LocalCommID() uint32            { return uint32(MAD(m).get(reqLocalCommID)) }
func (m REQ) ServiceID() ServiceID           { return ServiceID(MAD(m).get(reqServiceID)) }
func (m REQ) LocalCAGUID() uint64            { return MAD(m).get(reqLocalCAGUID) }
func (m REQ) LocalQKey() uint32              { return uint32(MAD(m).get(reqLocalQKey)) }
func (m REQ) LocalQPN() uint32               { return uint32(MAD(m).get(reqLocalQPN)) }
func (m REQ) ResponderResources() uint8      { return uint8(MAD(m).get(reqResponderResources)) }
func (m REQ) InitiatorDepth() uint8          { return uint8(MAD(m).get(reqInitiatorDepth)) }
func (m REQ) RemoteCMResponseTimeout() uint8 { return uint8(MAD(m).get(reqRemoteCMRespTO)) }
func (m REQ) TransportType() Transport       { return Transport(MAD(m).get(reqTransportType)) }
func (m REQ) StartingPSN() uint32            { return uint32(MAD(m).get(reqStartingPSN)) }
func (m REQ) LocalCMResponseTimeout() uint8  { return uint8(MAD(m).get(reqLocalCMRespTO)) }
func (m REQ) RetryCount() uint8              { return uint8(MAD(m).get(reqRetryCount)) }
func (m REQ) PKey() uint16                   { return uint16(MAD(m).get(reqPKey)) }
func (m REQ) PathMTU() uint8                 { return uint8(MAD(m).get(reqPathMTU)) }
func (m REQ) RNRRetryCount() uint8           { return uint8(MAD(m).get(reqRNRRetryCount)) }
func (m REQ) MaxCMRetries() uint8            { return uint8(MAD(m).get(reqMaxCMRetries)) }
func (m REQ) SRQ() bool                      { return MAD(m).flag(reqSRQ) }
func (m REQ) PrimaryLocalLID() uint16        { return uint16(MAD(m).get(reqPrimaryLocalLID)) }
func (m REQ) PrimaryRemoteLID() uint16       { return uint16(MAD(m).get(reqPrimaryRemoteLID)) }
func (m REQ) PrimaryLocalGID() (g [16]byte)  { copy(g[:], MAD(m).bytes(reqPrimaryLocalGID)); return }
func (m REQ) PrimaryRemoteGID() (g [16]byte) {
	copy(g[:], MAD(m).bytes(reqPrimaryRemoteGID))
	return
}
func (m REQ) PrimaryFlowLabel() uint32      { return uint32(MAD(m).get(reqPrimaryFlowLabel)) }
func (m REQ) PrimaryPacketRate() uint8      { return uint8(MAD(m).get(reqPrimaryPacketRate)) }
func (m REQ) PrimaryTrafficClass() uint8    { return uint8(MAD(m).get(reqPrimaryTC)) }
func (m REQ) PrimaryHopLimit() uint8        { return uint8(MAD(m).get(reqPrimaryHopLimit)) }
func (m REQ) PrimarySL() uint8              { return uint8(MAD(m).get(reqPrimarySL)) }
func (m REQ) PrimarySubnetLocal() bool      { return MAD(m).flag(reqPrimarySubnetLocal) }
func (m REQ) PrimaryLocalAckTimeout() uint8 { return uint8(MAD(m).get(reqPrimaryAckTimeout)) }
func (m REQ) AltLocalLID() uint16           { return uint16(MAD(m).get(reqAltLocalLID)) }
func (m REQ) PrivateData() []byte           { return MAD(m).bytes(reqPrivateData) }

func (m REQ) SetLocalCommID(v uint32)            { MAD(m).set(reqLocalCommID, uint64(v)) }
func (m REQ) SetServiceID(v ServiceID)           { MAD(m).set(reqServiceID, uint64(v)) }
func (m REQ) SetLocalCAGUID(v uint64)            { MAD(m).set(reqLocalCAGUID, v) }
func (m REQ) SetLocalQKey(v uint32)              { MAD(m).set(reqLocalQKey, uint64(v)) }
func (m REQ) SetLocalQPN(v uint32)               { MAD(m).set(reqLocalQPN, uint64(v)) }
func (m REQ) SetResponderResources(v uint8)      { MAD(m).set(reqResponderResources, uint64(v)) }
func (m REQ) SetInitiatorDepth(v uint8)          { MAD(m).set(reqInitiatorDepth, uint64(v)) }
func (m REQ) SetRemoteCMResponseTimeout(v uint8) { MAD(m).set(reqRemoteCMRespTO, uint64(v)) }
func (m REQ) SetTransportType(v Transport)       { MAD(m).set(reqTransportType, uint64(v)) }
func (m REQ) SetStartingPSN(v uint32)            { MAD(m).set(reqStartingPSN, uint64(v)) }
func (m REQ) SetLocalCMResponseTimeout(v uint8)  { MAD(m).set(reqLocalCMRespTO, uint64(v)) }
func (m REQ) SetRetryCount(v uint8)              { MAD(m).set(reqRetryCount, uint64(v)) }
func (m REQ) SetPKey(v uint16)                   { MAD(m).set(reqPKey, uint64(v)) }
func (m REQ) SetPathMTU(v uint8)                 { MAD(m).set(reqPathMTU, uint64(v)) }
func (m REQ) SetRNRRetryCount(v uint8)           { MAD(m).set(reqRNRRetryCount, uint64(v)) }
func (m REQ) SetMaxCMRetries(v uint8)            { MAD(m).set(reqMaxCMRetries, uint64(v)) }
func (m REQ) SetSRQ(v bool)                      { MAD(m).setFlag(reqSRQ, v) }
func (m REQ) SetPrimaryLocalLID(v uint16)        { MAD(m).set(reqPrimaryLocalLID, uint64(v)) }
func (m REQ) SetPrimaryRemoteLID(v uint16)       { MAD(m).set(reqPrimaryRemoteLID, uint64(v)) }
func (m REQ) SetPrimaryLocalGID(g [16]byte)      { MAD(m).put(reqPrimaryLocalGID, g[:]) }
func (m REQ) SetPrimaryRemoteGID(g [16]byte)     { MAD(m).put(reqPrimaryRemoteGID, g[:]) }
func (m REQ) SetPrimaryFlowLabel(v uint32)       { MAD(m).set(reqPrimaryFlowLabel, uint64(v)) }
func (m REQ) SetPrimaryPacketRate(v uint8)       { MAD(m).set(reqPrimaryPacketRate, uint64(v)) }
func (m REQ) SetPrimaryTrafficClass(v uint8)     { MAD(m).set(reqPrimaryTC, uint64(v)) }
func (m REQ) SetPrimaryHopLimit(v uint8)         { MAD(m).set(reqPrimaryHopLimit, uint64(v)) }
func (m REQ) SetPrimarySL(v uint8)               { MAD(m).set(reqPrimarySL, uint64(v)) }
func (m REQ) SetPrimarySubnetLocal(v bool)       { MAD(m).setFlag(reqPrimarySubnetLocal, v) }
func (m REQ) SetPrimaryLocalAckTimeout(v uint8)  { MAD(m).set(reqPrimaryAckTimeout, uint64(v)) }
func (m REQ) SetPrivateData(b []byte)            { MAD(m).put(reqPrivateData, b) }

// MRA accessors.
func (m MRA) LocalCommID() uint32       { return uint32(MAD(m).get(mraLocalCommID)) }
func (m MRA) RemoteCommID() uint32      { return uint32(MAD(m).get(mraRemoteCommID)) }
func (m MRA) MsgMRAed() MsgKind         { return MsgKind(MAD(m).get(mraMsgMRAed)) }
func (m MRA) ServiceTimeout() uint8     { return uint8(MAD(m).get(mraServiceTimeout)) }
func (m MRA) PrivateData() []byte       { return MAD(m).bytes(mraPrivateData) }
func (m MRA) SetLocalCommID(v uint32)   { MAD(m).set(mraLocalCommID, uint64(v)) }
func (m MRA) SetRemoteCommID(v uint32)  { MAD(m).set(mraRemoteCommID, uint64(v)) }
func (m MRA) SetMsgMRAed(v MsgKind)     { MAD(m).set(mraMsgMRAed, uint64(v)) }
func (m MRA) SetServiceTimeout(v uint8) { MAD(m).set(mraServiceTimeout, uint64(v)) }
func (m MRA) SetPrivateData(b []byte)   { MAD(m).put(mraPrivateData, b) }

// REJ accessors.
func (m REJ) LocalCommID() uint32      { return uint32(MAD(m).get(rejLocalCommID)) }
func (m REJ) RemoteCommID() uint32     { return uint32(MAD(m).get(rejRemoteCommID)) }
func (m REJ) MsgRejected() MsgKind     { return MsgKind(MAD(m).get(rejMsgRejected)) }
func (m REJ) RejectInfoLen() uint8     { return uint8(MAD(m).get(rejInfoLen)) }
func (m REJ) Reason() RejectReason     { return RejectReason(MAD(m).get(rejReason)) }
func (m REJ) ARI() []byte              { return MAD(m).bytes(rejARI)[:min(int(m.RejectInfoLen()), 72)] }
func (m REJ) PrivateData() []byte      { return MAD(m).bytes(rejPrivateData) }
func (m REJ) SetLocalCommID(v uint32)  { MAD(m).set(rejLocalCommID, uint64(v)) }
func (m REJ) SetRemoteCommID(v uint32) { MAD(m).set(rejRemoteCommID, uint64(v)) }
func (m REJ) SetMsgRejected(v MsgKind) { MAD(m).set(rejMsgRejected, uint64(v)) }
func (m REJ) SetReason(v RejectReason) { MAD(m).set(rejReason, uint64(v)) }
func (m REJ) SetPrivateData(b []byte)  { MAD(m).put(rejPrivateData, b) }
func (m REJ) SetARI(b []byte) {
	n := min(len(b), 72)
	MAD(m).set(rejInfoLen, uint64(n))
	MAD(m).put(rejARI, b[:n])
}

// REP accessors.
func (m REP) LocalCommID() uint32           { return uint32(MAD(m).get(repLocalCommID)) }
func (m REP) RemoteCommID() uint32          { return uint32(MAD(m).get(repRemoteCommID)) }
func (m REP) LocalQKey() uint32             { return uint32(MAD(m).get(repLocalQKey)) }
func (m REP) LocalQPN() uint32              { return uint32(MAD(m).get(repLocalQPN)) }
func (m REP) StartingPSN() uint32           { return uint32(MAD(m).get(repStartingPSN)) }
func (m REP) ResponderResources() uint8     { return uint8(MAD(m).get(repResponderResources)) }
func (m REP) InitiatorDepth() uint8         { return uint8(MAD(m).get(repInitiatorDepth)) }
func (m REP) TargetAckDelay() uint8         { return uint8(MAD(m).get(repTargetAckDelay)) }
func (m REP) FailoverAccepted() uint8       { return uint8(MAD(m).get(repFailoverAccepted)) }
func (m REP) RNRRetryCount() uint8          { return uint8(MAD(m).get(repRNRRetryCount)) }
func (m REP) SRQ() bool                     { return MAD(m).flag(repSRQ) }
func (m REP) LocalCAGUID() uint64           { return MAD(m).get(repLocalCAGUID) }
func (m REP) PrivateData() []byte           { return MAD(m).bytes(repPrivateData) }
func (m REP) SetLocalCommID(v uint32)       { MAD(m).set(repLocalCommID, uint64(v)) }
func (m REP) SetRemoteCommID(v uint32)      { MAD(m).set(repRemoteCommID, uint64(v)) }
func (m REP) SetLocalQKey(v uint32)         { MAD(m).set(repLocalQKey, uint64(v)) }
func (m REP) SetLocalQPN(v uint32)          { MAD(m).set(repLocalQPN, uint64(v)) }
func (m REP) SetStartingPSN(v uint32)       { MAD(m).set(repStartingPSN, uint64(v)) }
func (m REP) SetResponderResources(v uint8) { MAD(m).set(repResponderResources, uint64(v)) }
func (m REP) SetInitiatorDepth(v uint8)     { MAD(m).set(repInitiatorDepth, uint64(v)) }
func (m REP) SetTargetAckDelay(v uint8)     { MAD(m).set(repTargetAckDelay, uint64(v)) }
func (m REP) SetRNRRetryCount(v uint8)      { MAD(m).set(repRNRRetryCount, uint64(v)) }
func (m REP) SetSRQ(v bool)                 { MAD(m).setFlag(repSRQ, v) }
func (m REP) SetLocalCAGUID(v uint64)       { MAD(m).set(repLocalCAGUID, v) }
func (m REP) SetPrivateData(b []byte)       { MAD(m).put(repPrivateData, b) }

// RTU, DREQ and DREP accessors.
func (m RTU) LocalCommID() uint32       { return uint32(MAD(m).get(rtuLocalCommID)) }
func (m RTU) RemoteCommID() uint32      { return uint32(MAD(m).get(rtuRemoteCommID)) }
func (m RTU) PrivateData() []byte       { return MAD(m).bytes(rtuPrivateData) }
func (m RTU) SetLocalCommID(v uint32)   { MAD(m).set(rtuLocalCommID, uint64(v)) }
func (m RTU) SetRemoteCommID(v uint32)  { MAD(m).set(rtuRemoteCommID, uint64(v)) }
func (m RTU) SetPrivateData(b []byte)   { MAD(m).put(rtuPrivateData, b) }
func (m DREQ) LocalCommID() uint32      { return uint32(MAD(m).get(dreqLocalCommID)) }
func (m DREQ) RemoteCommID() uint32     { return uint32(MAD(m).get(dreqRemoteCommID)) }
func (m DREQ) RemoteQPN() uint32        { return uint32(MAD(m).get(dreqRemoteQPN)) }
func (m DREQ) PrivateData() []byte      { return MAD(m).bytes(dreqPrivateData) }
func (m DREQ) SetLocalCommID(v uint32)  { MAD(m).set(dreqLocalCommID, uint64(v)) }
func (m DREQ) SetRemoteCommID(v uint32) { MAD(m).set(dreqRemoteCommID, uint64(v)) }
func (m DREQ) SetRemoteQPN(v uint32)    { MAD(m).set(dreqRemoteQPN, uint64(v)) }
func (m DREQ) SetPrivateData(b []byte)  { MAD(m).put(dreqPrivateData, b) }
func (m DREP) LocalCommID() uint32      { return uint32(MAD(m).get(drepLocalCommID)) }
func (m DREP) RemoteCommID() uint32     { return uint32(MAD(m).get(drepRemoteCommID)) }
func (m DREP) PrivateData() []byte      { return MAD(m).bytes(drepPrivateData) }
func (m DREP) SetLocalCommID(v uint32)  { MAD(m).set(drepLocalCommID, uint64(v)) }
func (m DREP) SetRemoteCommID(v uint32) { MAD(m).set(drepRemoteCommID, uint64(v)) }
func (m DREP) SetPrivateData(b []byte)  { MAD(m).put(drepPrivateData, b) }

// SIDR_REQ and SIDR_REP accessors.
func (m SIDRREQ) RequestID() uint32        { return uint32(MAD(m).get(sreqRequestID)) }
func (m SIDRREQ) PKey() uint16             { return uint16(MAD(m).get(sreqPKey)) }
func (m SIDRREQ) ServiceID() ServiceID     { return ServiceID(MAD(m).get(sreqServiceID)) }
func (m SIDRREQ) PrivateData() []byte      { return MAD(m).bytes(sreqPrivateData) }
func (m SIDRREQ) SetRequestID(v uint32)    { MAD(m).set(sreqRequestID, uint64(v)) }
func (m SIDRREQ) SetPKey(v uint16)         { MAD(m).set(sreqPKey, uint64(v)) }
func (m SIDRREQ) SetServiceID(v ServiceID) { MAD(m).set(sreqServiceID, uint64(v)) }
func (m SIDRREQ) SetPrivateData(b []byte)  { MAD(m).put(sreqPrivateData, b) }
func (m SIDRREP) RequestID() uint32        { return uint32(MAD(m).get(srepRequestID)) }
func (m SIDRREP) Status() SIDRStatus       { return SIDRStatus(MAD(m).get(srepStatus)) }
func (m SIDRREP) QPN() uint32              { return uint32(MAD(m).get(srepQPN)) }
func (m SIDRREP) ServiceID() ServiceID     { return ServiceID(MAD(m).get(srepServiceID)) }
func (m SIDRREP) QKey() uint32             { return uint32(MAD(m).get(srepQKey)) }
func (m SIDRREP) PrivateData() []byte      { return MAD(m).bytes(srepPrivateData) }
func (m SIDRREP) SetRequestID(v uint32)    { MAD(m).set(srepRequestID, uint64(v)) }
func (m SIDRREP) SetStatus(v SIDRStatus)   { MAD(m).set(srepStatus, uint64(v)) }
func (m SIDRREP) SetQPN(v uint32)          { MAD(m).set(srepQPN, uint64(v)) }
func (m SIDRREP) SetServiceID(v ServiceID) { MAD(m).set(srepServiceID, uint64(v)) }
func (m SIDRREP) SetQKey(v uint32)         { MAD(m).set(srepQKey, uint64(v)) }
func (m SIDRREP) SetPrivateData(b []byte)  { MAD(m).put(srepPrivateData, b) }

// LAP accessors (recognised only).
func (m LAP) LocalCommID() uint32  { return uint32(MAD(m).get(lapLocalCommID)) }
func (m LAP) RemoteCommID() uint32 { return uint32(MAD(m).get(lapRemoteCommID)) }

// ClassPortInfo accessors.
func (m ClassPortInfo) BaseVersion() uint8       { return uint8(MAD(m).get(cpiBaseVersion)) }
func (m ClassPortInfo) ClassVersion() uint8      { return uint8(MAD(m).get(cpiClassVersion)) }
func (m ClassPortInfo) CapabilityMask() uint16   { return uint16(MAD(m).get(cpiCapMask)) }
func (m ClassPortInfo) RespTimeValue() uint8     { return uint8(MAD(m).get(cpiRespTime)) }
func (m ClassPortInfo) SetBaseVersion(v uint8)   { MAD(m).set(cpiBaseVersion, uint64(v)) }
func (m ClassPortInfo) SetClassVersion(v uint8)  { MAD(m).set(cpiClassVersion, uint64(v)) }
func (m ClassPortInfo) SetRespTimeValue(v uint8) { MAD(m).set(cpiRespTime, uint64(v)) }

// Transport is the REQ's transport service type.
type Transport uint8

// Transport service types.
const (
	TransportRC  Transport = 0
	TransportUC  Transport = 1
	TransportXRC Transport = 3
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportXRC:
		return "XRC"
	}
	return fmt.Sprintf("Transport(%d)", uint8(t))
}

// MsgKind names the message an MRA or a REJ refers to.
type MsgKind uint8

// Message kinds of MsgMRAed and MsgRejected.
const (
	MsgREQ   MsgKind = 0
	MsgREP   MsgKind = 1
	MsgOther MsgKind = 2
)

func (k MsgKind) String() string {
	switch k {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other"
	}
	return fmt.Sprintf("MsgKind(%d)", uint8(k))
}

// SIDRStatus is the status of a SIDR_REP.
type SIDRStatus uint8

// SIDR_REP statuses (IBTA table 115).
const (
	SIDRSuccess     SIDRStatus = 0
	SIDRUnsupported SIDRStatus = 1 // no listener for the service ID
	SIDRReject      SIDRStatus = 2
	SIDRNoQP        SIDRStatus = 3
	SIDRRedirect    SIDRStatus = 4
	SIDRBadVersion  SIDRStatus = 5
)

var sidrNames = [...]string{"SUCCESS", "UNSUPPORTED", "REJECT", "NO_QP", "REDIRECT", "UNSUPPORTED_VERSION"}

func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}

// Describe returns a one-line decoding of the MAD (header and attribute
// fields; byte fields by length, private data trimmed of trailing zeros),
// for logs and test failures.
func Describe(m MAD) string {
	if len(m) < MADLen {
		return "short MAD"
	}
	s := fmt.Sprintf("%v %v tid=%#x", m.AttrID(), m.Method(), m.TID())
	l, ok := LayoutOf(m.AttrID())
	if !ok {
		return s
	}
	for _, fd := range l.Fields {
		if fd.IsBytes() {
			b := fd.Bytes(m)
			n := len(b)
			for n > 0 && b[n-1] == 0 {
				n--
			}
			if n > 0 {
				s += fmt.Sprintf(" %s=%x", fd.Name, b[:n])
			}
			continue
		}
		if v := fd.Get(m); v != 0 {
			s += fmt.Sprintf(" %s=%#x", fd.Name, v)
		}
	}
	return s
}
