// Package freezetest holds the acceptance tests and the benchmark of the
// agent's resume support. They run the real agent binary (built by
// TestMain, or RAYITO_FREEZETEST_AGENT) in a process of its own and drive
// it with the Go client, as a host and a user would.
//
// A VM pause is simulated by freezing the agent's whole process tree: the
// agent, its commands, terminals and kernels. The tests prefer the cgroup
// v2 freezer: each agent starts straight into a cgroup of its own
// (CLONE_INTO_CGROUP), so every descendant is in it, and cgroup.freeze
// stops them all at once without any of them noticing, as a paused VM
// would; cgroup.kill is the power cut. Without a writable cgroup2 mount
// they fall back to SIGSTOP: the agent, then each descendant found through
// the ppid field of /proc/*/stat, parents before children, walking again
// until a walk finds nothing new; SIGCONT undoes it children first. A
// shell with job control would notice its children stopping, so the
// terminals in these tests run non-interactive shells.
// RAYITO_FREEZER=signal (or cgroup) forces one.
//
// After the thaw the test does what a host does after a restore: POST
// /v1/resume. The agent cuts every connection with 4000, the client
// reconnects and reattaches, and the tests check that every byte and event
// arrived exactly once.
//
// The file transfer tests that need a real agent live here too: transfers
// across a pause, a power cut in the middle of an upload, and 1 GiB each
// way over HTTP and the websocket (run with the agent binary's own cp, so
// that only the test process pays for -race).
package freezetest
