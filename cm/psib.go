package cm

// cmaHeaderIn reports whether the private data of a REQ or SIDR_REQ for
// service ID sid starts with the rdma_cm header. Linux puts it there in
// every port space, RDMA_PS_IB included, when the IDs have IP addresses
// (cma_user_data_offset: no header only for AF_IB, which this package
// does not serve), and a Linux listener with an IP address rejects a
// request without one (REJ reason 28). A PS_IB request from an AF_IB ID
// has no header; it is told apart by one that does not check.
func cmaHeaderIn(sid ServiceID, priv []byte) bool {
	if sid.PortSpace() != PSIB {
		return true
	}
	return len(priv) >= CMAHeaderLen && CMAHeader(priv[:CMAHeaderLen]).Check() == nil
}
