package qp_test

import (
	"fmt"

	"github.com/softverbs/softverbs/qp"
)

// The masks an RC QP needs to go from RESET to RTS, one modify at a time,
// and what happens when a step is skipped or an attribute is missing.
func ExampleCheckTransition() {
	steps := []struct {
		cur, next qp.State
		mask      qp.AttrMask
	}{
		{qp.Reset, qp.Init, qp.AttrState | qp.AttrPkeyIndex | qp.AttrPort | qp.AttrAccessFlags},
		{qp.Init, qp.RTR, qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN |
			qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
		{qp.RTR, qp.RTS, qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry |
			qp.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		err := qp.CheckTransition(s.cur, s.next, qp.RC, s.mask)
		fmt.Printf("%v->%v %v: %v\n", s.cur, s.next, s.mask, err)
	}

	fmt.Println(qp.CheckTransition(qp.Reset, qp.RTR, qp.RC, qp.AttrState))
	fmt.Println(qp.CheckTransition(qp.RTR, qp.RTS, qp.RC, qp.AttrState|qp.AttrSQPSN))
	// Output:
	// RESET->INIT STATE|ACCESS_FLAGS|PKEY_INDEX|PORT: <nil>
	// INIT->RTR STATE|AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN: <nil>
	// RTR->RTS STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN: <nil>
	// modify RESET->RTR on RC QP: invalid state: transition not allowed
	// modify RTR->RTS on RC QP: invalid argument: missing required attributes TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC
}
