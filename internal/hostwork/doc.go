// Package hostwork is where a run's time on the host went: each read and
// write it made (a netlink probe, a listing, a file read, a write, a lock
// wait, a question to the host registry) counted and timed by kind as it
// was made, with the longest step, and the CPU time and preemptions the
// kernel counts for each step's thread, so that a step's wait for the
// host is told from its wait for a CPU. A Teardown's prevention and force
// cleanup (package footprint) log it at Debug ("host work timed"); the
// benchmarks take their tails apart with it. Nothing is read to measure:
// a step costs two getrusage and two gettid calls more.
//
// Files:
//
//	doc.go                this overview
//	spent.go              Spent, Tally, Step: what a run spent; Meter, Kind: adding its steps up
//	threadclock_linux.go  a step's thread's CPU time and preemptions
//	threadclock_other.go  the same off Linux: unknown
package hostwork
