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
// would be and create files that user owns. The kernel checks file access
// against a thread's filesystem identity (fsuid, fsgid, supplementary
// groups), which on Linux belongs to the thread, not the process. So an
// operation runs on an OS thread that has the user's filesystem identity
// and nothing else of it: moving fsuid away from 0 drops the filesystem
// capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER...) from that
// thread, so the kernel decides exactly as it would for a process of the
// user, ACLs and all. The identity is set with raw system calls (the libc
// and Go wrappers of setgroups change every thread of the process).
//
// Each identity in use keeps up to 16 such threads, locked to worker
// goroutines that take operations from a channel and give their thread
// back after 10 s without work. A thread never runs anything else while
// it has a borrowed identity: if restoring the agent's identity ever
// failed, its goroutine would end still locked and the runtime would
// retire the thread.
//
// Why kept threads: a credential change costs about 5 µs on the project's
// VM (a bare system call about 1.2 µs), and an operation on a thread of
// its own needs six (fsuid, fsgid and groups, there and back). Measured in
// one run (BenchmarkIdentitySwitch, load 6 to 9), an empty operation as
// nobody costs 19 µs handed to a kept thread (two thread wake-ups), 32 to
// 35 µs on a new goroutine that switches and switches back, and 29 to
// 41 µs switching on the caller's own thread (which also could not retire
// the thread on failure). An operation as the agent's own user runs
// directly. A helper process per user would cost a round trip through a
// pipe per operation plus a process per user, for nothing the kernel's
// per-thread identity does not already give.
//
// Data moves outside the user's thread: a file is opened (or created) as
// the user, and the descriptor is read or written by whatever goroutine
// streams it, since permission is checked at open. Files and directories
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
