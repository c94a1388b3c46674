// Package vm boots the rayito root filesystem image under QEMU and takes
// and restores snapshots of it, for the end-to-end tests and "make vm".
//
// A VM runs on a private qcow2 layer over the base image, so the image is
// never written and a snapshot (device state and memory, plus a copy of the
// disk layer) can be restored any number of times. The agent's port is
// forwarded from a free port on 127.0.0.1; QEMU is driven over QMP.
//
// QEMU's exit status is collected with os/exec, so this package must not be
// used in a process that runs a proc.Reaper.
package vm
