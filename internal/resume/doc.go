// Package resume notices that the VM was restored from a memory snapshot
// and runs the agent's resume sequence exactly once per restore.
//
// Several detectors may report the same restore: the host's POST
// /v1/resume, the VMGenID change uevent, the VMClock generation counter,
// and a jump between the guest's clocks. Any of them may be missing on a
// given hypervisor, so all of them feed one Manager that deduplicates: each
// source reports a restore at most once. A guest detector's report that
// arrives within DedupWindow of the current restore, from a source that
// has not reported it yet, belongs to it; the host's report belongs to the
// current restore if the guest noticed that one by itself and the host has
// not reported it yet, whenever it comes; anything else is a new restore.
//
// The sequence (protocol section 7): set the clock if the host sent one,
// check every kernel, publish the new generation, then cut every
// connection opened before the restore so clients reattach from their
// cursors.
package resume
