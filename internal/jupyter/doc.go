// Package jupyter runs Jupyter kernels for the agent: it finds kernelspecs,
// starts kernel processes with a fresh connection file, speaks the Jupyter
// messaging protocol to them over ZeroMQ (go-zeromq/zmq4) with HMAC-SHA256
// signed messages, and turns executions into cell streams.
//
// The problem it solves: a kernel is a stateful process that several
// clients drive at once, that can die or hang at any moment, and whose
// outputs must reach clients that come and go. So every kernel has one
// queue of cells run strictly one after another by one runner goroutine;
// outputs only ever go into stream logs (never to a client directly); the
// process's exit comes from the shared proc.Reaper and ends its cells at
// once; and Check probes heartbeat and control within a bound so a resume
// can tell live kernels from lost ones.
//
// zmq4's Recv has no timeout and blocks forever after its peer died, so
// each socket has exactly one pump goroutine that reads it until Close,
// and nothing else ever waits on a socket directly.
package jupyter
