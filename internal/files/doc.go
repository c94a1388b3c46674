// Package files reads, writes, lists and changes files as the user who
// asks, for every surface of the agent (the native protocol's ops and
// HTTP routes, and adapters such as E2B's envd API). Its API speaks Go:
// Info values, sentinel errors (ErrNotFound, ErrExists, ErrPermission...)
// inside *Error, an atomic Writer, a File to read; each surface maps them
// onto its own wire format.
//
// # Acting as a user
//
// The agent runs as root; a file operation must be checked as its user
// would be and create files that user owns. On Linux a thread's
// credentials are its own, not the process's: the system calls under
// setresuid(2) and setresgid(2) change the calling thread only (the libc
// and Go wrappers repeat them on every thread of the process). So an
// operation runs on an OS thread that has the user's effective (and so
// filesystem) uid and gid, and supplementary groups, while its real and
// saved ids stay root's, which is what lets it switch back. An effective
// uid away from 0 clears the thread's effective capabilities, so the
// kernel decides exactly as it would for a process of the user, ACLs and
// all; they come back from the permitted set when the uid returns to 0.
// (Until 2026-12-02 only the filesystem ids were switched, with
// setfsuid(2), which drops only the filesystem capabilities and reports
// no failure: each change needed a second call to check it.)
//
// Each operation as another user runs on a goroutine of its own, locked
// to its thread, which takes the user's identity, runs the operation and
// gives the identity back before the thread returns to the runtime's pool.
// If restoring the agent's identity ever failed, the goroutine would end
// still locked and the runtime would retire the thread, so no other
// goroutine ever runs with a borrowed identity. (The runtime never clones
// a new thread from a locked one, so none inherits it either.)
//
// Why a new goroutine each time: a system call costs about 1.1 µs on the
// project's VM and a credential change about 1.9; a switch there and back
// is four changes (gid and uid), plus two changes of the groups only for a
// user with groups beyond its primary one (the kernel checks the fsgid
// first, so nobody needs none).
// The other ways cost more where it counts. Threads kept with a user's
// identity (this package until 2026-12-02) spared the changes but handed
// every operation to another thread and back, two thread wake-ups, which
// a VM prices high when the other vCPU is idle. Switching on the caller's
// own thread (the connection's reader, for a stat) is the cheapest alone
// (BenchmarkIdentitySwitch: 8 µs against 16 to 17 with a goroutine each),
// but measured behind requests it slowed every other request of that
// connection by a fifth (websocket requests 42 to 44 µs against 35 to 37)
// and a stat as nobody with them (63 to 73 µs against 55 to 57), twice
// measured. Not because of the lock: with no goroutine and no switch at
// all, requests were as slow. The new goroutine makes the runtime wake a
// thread on the other vCPU, which is then still awake for the next
// wake-ups instead of halted (BenchmarkStatRoundTrip in the client
// package; docs/benchmarks.md, Files). Kept threads took 122 to 126 µs for
// that stat. A helper process per user would cost a round trip
// through a pipe per operation plus a process per user, for nothing the
// kernel's per-thread identity does not already give.
//
// Permission is checked when a file is opened (or created) as the user,
// so a download's descriptor is read by whatever goroutine streams it.
// Writes are made as the user too (Writer.writeAsUser): what a write may
// take of the disk (the blocks ext4 keeps for root, a quota) is decided at
// each write for the thread that writes. Files and directories
// an operation creates get modes from the agent's umask (what the user's
// commands started by the agent get too) unless a mode is given.
// Relative paths are relative to the user's home.
//
// # Writing
//
// Writer never leaves a half-written file: it writes a temporary file
// next to the target (".name.rayito-XXXXXXXX.tmp", same directory, so the
// rename is atomic), syncs it and renames it over the target on Commit. A
// failure or Abort removes the temporary file; two writers of one path
// never mix, the last commit wins. Each temporary file is journaled in the
// agent's state directory while it exists, so the ones a crash left
// behind are removed at the next start. The directory is not synced after
// the rename: after a power cut the path has the old content or the new.
//
// # Streams
//
// ReadStream and WriteStream run transfers on stream logs, so they get
// windows, cursors and reattach after a resume like command output does.
// An upload's input is bounded by UploadWindow and reported as it is
// written; a client that keeps within it is never refused. A transfer
// whose client has been gone for the stream's grace gives up (an upload
// removes its temporary file).
package files
