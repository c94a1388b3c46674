// Package resume is the sandbox's lifecycle: it takes the sandbox through
// a pause and the restore that follows, and runs the agent's resume
// sequence exactly once per restore. (The name is the one the project's
// layout fixes; what it holds is every lifecycle sequence.)
//
// Each sequence (a pause's quiesce, its thaw, a resume, a later report of
// a resume) is an ordered list of named steps run by one runner
// (sequence.go), which records each step's status, time and words for
// the answers and /health: adding a step is one function and one row in
// its sequence's list (resumesteps.go for the resume's).
//
// A pause comes in two phases (pause.go). Before the host freezes the VM
// it calls Pause: clients are told, pre-pause hooks run, user work is
// frozen, filesystems are synced (and frozen, for a disk-only snapshot)
// and memory may be given back. The resume sequence then thaws late, once
// the clock is set and the CRNG re-keyed, so no user process runs with
// either from before. A pause that no restore follows ends with Abort, or
// by itself after its ThawAfter of guest time.
//
// Several detectors may report the same restore: the host's POST
// /v1/resume, the VMGenID change uevent, the VMClock generation counter,
// and a jump between the guest's clocks. Any of them may be missing on a
// given hypervisor, so all of them feed one Manager that deduplicates: each
// source reports a restore at most once. A guest detector's report that
// arrives within DedupWindow of the current restore, from a source that
// has not reported it yet, belongs to it; the host's report belongs to the
// current restore if the guest noticed that one by itself and the host has
// not reported it yet, whenever it comes; anything after a pause is a new
// restore, but a guest detection noticed before the pause and handled
// after it is judged as of when it was noticed (takePauseFor). Each
// sequence takes the clock detector's new baselines, so a jump another
// source reported first is not reported later.
//
// The sequence (protocol section 7): set the clock if the host sent one,
// re-key the CRNG; on a clone or after a long pause reset the TCP
// connections user programs hold to other machines (netreset.go); repair
// the network (the host's facts, neighbours, gratuitous ARP); thaw user
// work; check every kernel and have it reseed; take a new identity if the
// host names another sandbox; run the post-clone and post-resume hooks
// (hooks.go); publish the new generation, rewrite the lifecycle file
// (lifecycle.go); then cut every connection opened before the restore so
// clients reattach from their cursors.
package resume
