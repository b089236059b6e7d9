// Package clock lets library code read time and set timers without touching the
// wall clock directly.
//
// Every softverbs package that needs time (retransmit and RNR timers, link
// delay, pcap timestamps) takes a Clock instead of calling time.Now,
// time.Sleep or time.AfterFunc. In production that Clock is Real, a thin
// wrapper over package time. In tests and simulations it is a Manual clock:
// time stands still until the test calls Advance, and then due timers fire in
// a fixed order (deadline first, creation order among equal deadlines) on the
// test's own goroutine. A simulated run is therefore reproducible from its
// seed, a 61 ms RNR timeout or a multi-second retry sequence costs no real
// time, and a failing run can be replayed exactly.
//
// Timer callbacks should do very little: flag work and schedule a task. They
// must not assume they run on any particular goroutine.
package clock
