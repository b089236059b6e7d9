// Package task runs work as run-to-completion tasks, like rxe's tasks.
//
// A Task wraps a Func that does one bounded batch of work (process a few
// packets, post a few WQEs) and reports whether more is left. Code that
// produces work for a task calls Schedule; the task's Executor then runs the
// Func on one of its goroutines. The task is a small state machine:
//
//	idle   --Schedule-->  queued  --executor picks it-->  busy
//	busy   --Schedule-->  armed   (a wake-up during a run is remembered)
//	busy   --done, more=false-->  idle
//	busy   --done, more=true -->  queued (at the back of the run queue)
//	armed  --done-->              queued
//
// so a wake-up is never lost, the Func never runs concurrently with itself,
// and a task that always has more work still lets the other tasks on its
// executor take turns. Schedule on a task that is already queued or armed is
// a single atomic load.
//
// A task's batch that wakes another task can carry it instead (Carry): the
// goroutine running the batch runs the woken task after it, as rxe runs
// its responder in the sender's context when nothing is queued for it.
//
// Two executors are provided. Inline runs tasks on the goroutine that calls
// Schedule, which makes a single-goroutine simulation deterministic. Pool
// runs tasks on a fixed number of worker goroutines sharing one FIFO run
// queue; there is no goroutine per task and no channel per wake-up.
package task
