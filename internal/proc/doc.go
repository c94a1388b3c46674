// Package proc starts and watches the sandbox's user processes: commands
// and kernels, and the hooks of the host and the sandbox.
//
// One Reaper (reaper.go) is the agent's child subreaper: every child is
// forked through it, so an exit is never reaped before its waiter exists,
// and orphans the user's programs leave are collected. Where cgroup v2
// allows, user processes are born in the user cgroup (cgroup.go), which
// limits their memory and tasks below the agent's own, can be frozen for a
// pause (freeze.go), and whose thrashing the memory guard ends
// (memguard.go); the OOM killer's victims are told apart (oomkill.go).
// The Manager (manager.go) runs commands as streams: their output is
// retained for attach and reattach, their input numbered, their end told.
package proc
