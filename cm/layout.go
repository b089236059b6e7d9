package cm

// MAD layouts (IBTA vol. 1 chapter 12 and 13.4; Linux ibta_vol1_c12.h).
// Offsets in the f() calls count from the start of the MAD data (byte 24)
// and bit positions from the most significant bit, as the IBTA tables do.
// Every view accessor below reads one of these fields: there is no other
// offset in the package.

// MAD sizes.
const (
	MADLen       = 256
	MADHeaderLen = 24
	MADDataLen   = MADLen - MADHeaderLen
)

// The common MAD header (IBTA 13.4.3), at the start of every MAD.
var (
	hdrBaseVersion  = Field{"BaseVersion", 0, 0, 8}
	hdrMgmtClass    = Field{"MgmtClass", 1, 0, 8}
	hdrClassVersion = Field{"ClassVersion", 2, 0, 8}
	hdrMethod       = Field{"Method", 3, 0, 8}
	hdrStatus       = Field{"Status", 4, 0, 16}
	hdrClassSpec    = Field{"ClassSpecific", 6, 0, 16}
	hdrTID          = Field{"TID", 8, 0, 64}
	hdrAttrID       = Field{"AttrID", 16, 0, 16}
	hdrResv         = Field{"Reserved", 18, 0, 16}
	hdrAttrMod      = Field{"AttrMod", 20, 0, 32}
)

var headerLayout = []Field{hdrBaseVersion, hdrMgmtClass, hdrClassVersion, hdrMethod, hdrStatus,
	hdrClassSpec, hdrTID, hdrAttrID, hdrResv, hdrAttrMod}

// REQ (ConnectRequest, IBTA table 99).
var (
	reqLocalCommID        = f("LocalCommID", 0, 0, 32)
	reqVendorID           = f("VendorID", 5, 0, 24)
	reqServiceID          = f("ServiceID", 8, 0, 64)
	reqLocalCAGUID        = f("LocalCAGUID", 16, 0, 64)
	reqLocalQKey          = f("LocalQKey", 28, 0, 32)
	reqLocalQPN           = f("LocalQPN", 32, 0, 24)
	reqResponderResources = f("ResponderResources", 35, 0, 8)
	reqLocalEECN          = f("LocalEECN", 36, 0, 24)
	reqInitiatorDepth     = f("InitiatorDepth", 39, 0, 8)
	reqRemoteEECN         = f("RemoteEECN", 40, 0, 24)
	reqRemoteCMRespTO     = f("RemoteCMResponseTimeout", 43, 0, 5)
	reqTransportType      = f("TransportServiceType", 43, 5, 2)
	reqE2EFlowControl     = f("EndToEndFlowControl", 43, 7, 1)
	reqStartingPSN        = f("StartingPSN", 44, 0, 24)
	reqLocalCMRespTO      = f("LocalCMResponseTimeout", 47, 0, 5)
	reqRetryCount         = f("RetryCount", 47, 5, 3)
	reqPKey               = f("PKey", 48, 0, 16)
	reqPathMTU            = f("PathMTU", 50, 0, 4)
	reqRDCExists          = f("RDCExists", 50, 4, 1)
	reqRNRRetryCount      = f("RNRRetryCount", 50, 5, 3)
	reqMaxCMRetries       = f("MaxCMRetries", 51, 0, 4)
	reqSRQ                = f("SRQ", 51, 4, 1)
	reqExtTransport       = f("ExtendedTransportType", 51, 5, 3)
	reqPrimaryLocalLID    = f("PrimaryLocalLID", 52, 0, 16)
	reqPrimaryRemoteLID   = f("PrimaryRemoteLID", 54, 0, 16)
	reqPrimaryLocalGID    = bytesField("PrimaryLocalGID", 56, 16)
	reqPrimaryRemoteGID   = bytesField("PrimaryRemoteGID", 72, 16)
	reqPrimaryFlowLabel   = f("PrimaryFlowLabel", 88, 0, 20)
	reqPrimaryPacketRate  = f("PrimaryPacketRate", 91, 2, 6)
	reqPrimaryTC          = f("PrimaryTrafficClass", 92, 0, 8)
	reqPrimaryHopLimit    = f("PrimaryHopLimit", 93, 0, 8)
	reqPrimarySL          = f("PrimarySL", 94, 0, 4)
	reqPrimarySubnetLocal = f("PrimarySubnetLocal", 94, 4, 1)
	reqPrimaryAckTimeout  = f("PrimaryLocalACKTimeout", 95, 0, 5)
	reqAltLocalLID        = f("AlternateLocalLID", 96, 0, 16)
	reqAltRemoteLID       = f("AlternateRemoteLID", 98, 0, 16)
	reqAltLocalGID        = bytesField("AlternateLocalGID", 100, 16)
	reqAltRemoteGID       = bytesField("AlternateRemoteGID", 116, 16)
	reqAltFlowLabel       = f("AlternateFlowLabel", 132, 0, 20)
	reqAltPacketRate      = f("AlternatePacketRate", 135, 2, 6)
	reqAltTC              = f("AlternateTrafficClass", 136, 0, 8)
	reqAltHopLimit        = f("AlternateHopLimit", 137, 0, 8)
	reqAltSL              = f("AlternateSL", 138, 0, 4)
	reqAltSubnetLocal     = f("AlternateSubnetLocal", 138, 4, 1)
	reqAltAckTimeout      = f("AlternateLocalACKTimeout", 139, 0, 5)
	reqPrivateData        = bytesField("PrivateData", 140, REQPrivateDataLen)
)

// MRA (MsgRcptAck, IBTA table 103).
var (
	mraLocalCommID    = f("LocalCommID", 0, 0, 32)
	mraRemoteCommID   = f("RemoteCommID", 4, 0, 32)
	mraMsgMRAed       = f("MessageMRAed", 8, 0, 2)
	mraServiceTimeout = f("ServiceTimeout", 9, 0, 5)
	mraPrivateData    = bytesField("PrivateData", 10, MRAPrivateDataLen)
)

// REJ (ConnectReject, IBTA table 104).
var (
	rejLocalCommID  = f("LocalCommID", 0, 0, 32)
	rejRemoteCommID = f("RemoteCommID", 4, 0, 32)
	rejMsgRejected  = f("MessageRejected", 8, 0, 2)
	rejInfoLen      = f("RejectInfoLength", 9, 0, 7)
	rejReason       = f("Reason", 10, 0, 16)
	rejARI          = bytesField("ARI", 12, 72)
	rejPrivateData  = bytesField("PrivateData", 84, REJPrivateDataLen)
)

// REP (ConnectReply, IBTA table 107).
var (
	repLocalCommID        = f("LocalCommID", 0, 0, 32)
	repRemoteCommID       = f("RemoteCommID", 4, 0, 32)
	repLocalQKey          = f("LocalQKey", 8, 0, 32)
	repLocalQPN           = f("LocalQPN", 12, 0, 24)
	repVendorIDH          = f("VendorIDH", 15, 0, 8)
	repLocalEECN          = f("LocalEECN", 16, 0, 24)
	repVendorIDM          = f("VendorIDM", 19, 0, 8)
	repStartingPSN        = f("StartingPSN", 20, 0, 24)
	repVendorIDL          = f("VendorIDL", 23, 0, 8)
	repResponderResources = f("ResponderResources", 24, 0, 8)
	repInitiatorDepth     = f("InitiatorDepth", 25, 0, 8)
	repTargetAckDelay     = f("TargetACKDelay", 26, 0, 5)
	repFailoverAccepted   = f("FailoverAccepted", 26, 5, 2)
	repE2EFlowControl     = f("EndToEndFlowControl", 26, 7, 1)
	repRNRRetryCount      = f("RNRRetryCount", 27, 0, 3)
	repSRQ                = f("SRQ", 27, 3, 1)
	repLocalCAGUID        = f("LocalCAGUID", 28, 0, 64)
	repPrivateData        = bytesField("PrivateData", 36, REPPrivateDataLen)
)

// RTU (ReadyToUse, IBTA table 110), DREQ (table 111), DREP (table 112).
var (
	rtuLocalCommID   = f("LocalCommID", 0, 0, 32)
	rtuRemoteCommID  = f("RemoteCommID", 4, 0, 32)
	rtuPrivateData   = bytesField("PrivateData", 8, RTUPrivateDataLen)
	dreqLocalCommID  = f("LocalCommID", 0, 0, 32)
	dreqRemoteCommID = f("RemoteCommID", 4, 0, 32)
	dreqRemoteQPN    = f("RemoteQPN", 8, 0, 24)
	dreqPrivateData  = bytesField("PrivateData", 12, DREQPrivateDataLen)
	drepLocalCommID  = f("LocalCommID", 0, 0, 32)
	drepRemoteCommID = f("RemoteCommID", 4, 0, 32)
	drepPrivateData  = bytesField("PrivateData", 8, DREPPrivateDataLen)
)

// SIDR_REQ (table 114) and SIDR_REP (table 115).
var (
	sreqRequestID   = f("RequestID", 0, 0, 32)
	sreqPKey        = f("PKey", 4, 0, 16)
	sreqServiceID   = f("ServiceID", 8, 0, 64)
	sreqPrivateData = bytesField("PrivateData", 16, SIDRREQPrivateDataLen)
	srepRequestID   = f("RequestID", 0, 0, 32)
	srepStatus      = f("Status", 4, 0, 8)
	srepAddInfoLen  = f("AdditionalInfoLength", 5, 0, 8)
	srepQPN         = f("QPN", 8, 0, 24)
	srepVendorIDL   = f("VendorIDL", 11, 0, 8)
	srepServiceID   = f("ServiceID", 12, 0, 64)
	srepQKey        = f("QKey", 20, 0, 32)
	srepAddInfo     = bytesField("AdditionalInfo", 24, 72)
	srepPrivateData = bytesField("PrivateData", 96, SIDRREPPrivateDataLen)
)

// LAP (LoadAlternatePath, table 116): recognised, never acted on (Linux
// ignores it on RoCE). Only the comm IDs are described.
var (
	lapLocalCommID  = f("LocalCommID", 0, 0, 32)
	lapRemoteCommID = f("RemoteCommID", 4, 0, 32)
)

// ClassPortInfo (IBTA 13.4.8.1, table 127).
var (
	cpiBaseVersion  = f("BaseVersion", 0, 0, 8)
	cpiClassVersion = f("ClassVersion", 1, 0, 8)
	cpiCapMask      = f("CapabilityMask", 2, 0, 16)
	cpiCapMask2     = f("CapabilityMask2", 4, 0, 27)
	cpiRespTime     = f("RespTimeValue", 7, 3, 5)
	cpiRedirGID     = bytesField("RedirectGID", 8, 16)
	cpiRedirTC      = f("RedirectTC", 24, 0, 8)
	cpiRedirSL      = f("RedirectSL", 25, 0, 4)
	cpiRedirFL      = f("RedirectFL", 25, 4, 20)
	cpiRedirLID     = f("RedirectLID", 28, 0, 16)
	cpiRedirPKey    = f("RedirectPKey", 30, 0, 16)
	cpiRedirQP      = f("RedirectQP", 33, 0, 24)
	cpiRedirQKey    = f("RedirectQKey", 36, 0, 32)
	cpiTrapGID      = bytesField("TrapGID", 40, 16)
	cpiTrapTC       = f("TrapTC", 56, 0, 8)
	cpiTrapSL       = f("TrapSL", 57, 0, 4)
	cpiTrapFL       = f("TrapFL", 57, 4, 20)
	cpiTrapLID      = f("TrapLID", 60, 0, 16)
	cpiTrapPKey     = f("TrapPKey", 62, 0, 16)
	cpiTrapHL       = f("TrapHL", 64, 0, 8)
	cpiTrapQP       = f("TrapQP", 65, 0, 24)
	cpiTrapQKey     = f("TrapQKey", 68, 0, 32)
)

// Private data capacities of each message.
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
)

// Layout is the list of an attribute's fields in wire order.
type Layout struct {
	Attr   AttrID
	Fields []Field
}

// layouts is the one table of attribute layouts; LayoutOf reads it.
var layouts = []Layout{
	{AttrClassPortInfo, []Field{cpiBaseVersion, cpiClassVersion, cpiCapMask, cpiCapMask2, cpiRespTime,
		cpiRedirGID, cpiRedirTC, cpiRedirSL, cpiRedirFL, cpiRedirLID, cpiRedirPKey, cpiRedirQP,
		cpiRedirQKey, cpiTrapGID, cpiTrapTC, cpiTrapSL, cpiTrapFL, cpiTrapLID, cpiTrapPKey, cpiTrapHL,
		cpiTrapQP, cpiTrapQKey}},
	{AttrREQ, []Field{reqLocalCommID, reqVendorID, reqServiceID, reqLocalCAGUID, reqLocalQKey,
		reqLocalQPN, reqResponderResources, reqLocalEECN, reqInitiatorDepth, reqRemoteEECN,
		reqRemoteCMRespTO, reqTransportType, reqE2EFlowControl, reqStartingPSN, reqLocalCMRespTO,
		reqRetryCount, reqPKey, reqPathMTU, reqRDCExists, reqRNRRetryCount, reqMaxCMRetries, reqSRQ,
		reqExtTransport, reqPrimaryLocalLID, reqPrimaryRemoteLID, reqPrimaryLocalGID,
		reqPrimaryRemoteGID, reqPrimaryFlowLabel, reqPrimaryPacketRate, reqPrimaryTC,
		reqPrimaryHopLimit, reqPrimarySL, reqPrimarySubnetLocal, reqPrimaryAckTimeout,
		reqAltLocalLID, reqAltRemoteLID, reqAltLocalGID, reqAltRemoteGID, reqAltFlowLabel,
		reqAltPacketRate, reqAltTC, reqAltHopLimit, reqAltSL, reqAltSubnetLocal, reqAltAckTimeout,
		reqPrivateData}},
	{AttrMRA, []Field{mraLocalCommID, mraRemoteCommID, mraMsgMRAed, mraServiceTimeout, mraPrivateData}},
	{AttrREJ, []Field{rejLocalCommID, rejRemoteCommID, rejMsgRejected, rejInfoLen, rejReason, rejARI,
		rejPrivateData}},
	{AttrREP, []Field{repLocalCommID, repRemoteCommID, repLocalQKey, repLocalQPN, repVendorIDH,
		repLocalEECN, repVendorIDM, repStartingPSN, repVendorIDL, repResponderResources,
		repInitiatorDepth, repTargetAckDelay, repFailoverAccepted, repE2EFlowControl,
		repRNRRetryCount, repSRQ, repLocalCAGUID, repPrivateData}},
	{AttrRTU, []Field{rtuLocalCommID, rtuRemoteCommID, rtuPrivateData}},
	{AttrDREQ, []Field{dreqLocalCommID, dreqRemoteCommID, dreqRemoteQPN, dreqPrivateData}},
	{AttrDREP, []Field{drepLocalCommID, drepRemoteCommID, drepPrivateData}},
	{AttrSIDRREQ, []Field{sreqRequestID, sreqPKey, sreqServiceID, sreqPrivateData}},
	{AttrSIDRREP, []Field{srepRequestID, srepStatus, srepAddInfoLen, srepQPN, srepVendorIDL,
		srepServiceID, srepQKey, srepAddInfo, srepPrivateData}},
	{AttrLAP, []Field{lapLocalCommID, lapRemoteCommID}},
}

// LayoutOf returns the layout of an attribute, and false for an attribute
// the package does not describe.
func LayoutOf(id AttrID) (Layout, bool) {
	for _, l := range layouts {
		if l.Attr == id {
			return l, true
		}
	}
	return Layout{}, false
}

// HeaderLayout returns the fields of the common MAD header.
func HeaderLayout() []Field { return headerLayout }
