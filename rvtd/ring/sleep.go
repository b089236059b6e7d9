package ring

// SleepBeyond is Sleep for a consumer that has taken held records: it
// has copied the first held unread records out (they stay unreleased until
// their completions are written, as the daemon's send and receive rings
// do) and only records after them are new. It sets NEED_WAKEUP and reports
// whether records beyond held arrived meanwhile (then it has cleared the
// flag again and the caller goes on consuming).
func (c *Consumer) SleepBeyond(held int) (ready bool, err error) {
	flags := c.hdr.u32(offFlags)
	flags.Or(NeedWakeup)
	n, err := c.Available()
	if n > held || err != nil {
		flags.And(^uint32(NeedWakeup))
		return true, err
	}
	return false, nil
}
