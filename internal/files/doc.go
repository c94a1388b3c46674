// Package files reads, writes, lists and changes files as the user who
// asks, for every surface of the agent (the native protocol's ops and
// HTTP routes, and adapters such as E2B's envd API). Its API speaks Go:
// Info values, sentinel errors (ErrNotFound, ErrExists, ErrPermission...)
// inside *Error, which also knows its protocol code (wire.Coded), an
// atomic Writer, a staged multi-file upload (Staged), a File to read.
//
// # Acting as a user
//
// The agent runs as root; a file operation must be checked as its user
// would be and create files that user owns. A thread's credentials are its
// own on Linux (the system calls under setresuid(2) and setresgid(2)
// change the calling thread only), so an operation as another user runs
// on a goroutine of its own, locked to its thread, which takes the user's
// effective uid, gid and groups, runs the operation and gives the
// identity back before the thread returns to the runtime's pool. An
// effective uid away from 0 clears the thread's effective capabilities,
// so the kernel decides exactly as for a process of the user, ACLs,
// reserved blocks and quotas included. If restoring the agent's identity
// ever failed, the goroutine would end still locked and the runtime would
// retire the thread: no other goroutine ever runs with a borrowed
// identity. (Why a goroutine per operation rather than the caller's
// thread or threads kept per user: docs/benchmarks.md, Files.)
//
// Permission is checked when a file is opened or created as the user, so
// a download's descriptor is read by whatever goroutine streams it; writes
// are made as the user too. Only file system calls run as the user, never
// a wait on a client (a tar download reads each directory and opens each
// file as the user, and writes to its client as the agent), and at most
// identityThreads do at once: no number of slow clients can pile up OS
// threads. The files transfers hold open are counted against a budget
// (held.go), as connections are against theirs. What an operation creates gets modes from the
// agent's umask unless a mode is given. Relative paths are relative to the
// user's home.
//
// # Writing
//
// Writer never leaves a half-written file: it writes a temporary file
// next to the target (".name.rayito-XXXXXXXX.tmp", IsTemp), syncs it and
// renames it over the target on Commit; a failure or Abort removes it,
// and the last of two commits wins. Temporary files are journaled in the
// agent's state directory while they exist, so the ones a crash left
// behind are removed at the next start.
//
// # Streams
//
// ReadStream and WriteStream run transfers on stream logs, so they get
// windows, cursors and reattach after a resume like command output does.
// An upload's input is bounded by UploadWindow; a client that keeps within
// it is never refused. A transfer whose client has been gone for the
// stream's grace gives up.
package files
