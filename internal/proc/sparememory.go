package proc

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The spare keeps memory as it keeps tasks. A runaway that reaches its
// memory limit holds it for as long as the kernel reclaims before its
// OOM kill (20 to 40 s in the test VM), and every new command born beside
// it needs memory under the same limit: it reclaims too, and waits. In
// the test VM an `exec echo ok` started in those seconds took 10 s. So
// work's memory.max is the user's less SpareMemory, which work can never
// take, and while work is at its limit, stalled on memory, a start goes
// to the spare,
// whose memory is whatever work leaves of the user's (at least
// SpareMemory). The spare has no memory limit of its own: a command that
// starts there during a stall may grow into the user's memory once the
// stall is over.

// SpareMemory is the part of the user's memory work cannot take, from
// the user's memory.high (at most memory.max): a sixteenth, from 16 MiB
// (a shell, ps and kill) to 64 MiB. At the floor of memory.high (64 MiB)
// it is a quarter, so work keeps at least 48 MiB.
func SpareMemory(l CgroupLimits) int64 { return min(max(l.MemoryHigh/16, 16<<20), 64<<20) }

// spareStallPercent is how much of the last 10 s some of work must have
// been stalled on memory (memory.pressure, "some avg10") for a start to
// go to the spare: a runaway at its limit stalls work far more (seen: over
// 50%), while reclaiming clean page cache, which fills work's memory in
// the ordinary course, stalls it little.
const spareStallPercent = 20.0

// The stall must be seen at once: a command started as a runaway meets
// its limit is caught with it (seen in the test VM: an echo born in work
// 6 s before the hog's OOM kill ran 2 s on the CPU reclaiming and waited
// 4 s for it, while avg10 was still climbing to its threshold). So a PSI
// trigger on work also counts: stalled for stallTrigger of a second,
// the kernel wakes the gauge, and the stall counts for stallFresh.
const (
	stallTrigger = 100 * time.Millisecond // 10% of the window
	stallWindow  = time.Second            // the kernel fires at most once a window
	stallFresh   = 2 * time.Second
)

// stallGauge says whether work is at its memory limit and stalled there
// now. A stall's average outlives its cause: just after a runaway's OOM
// kill a new command would still be sent to the spare (and a fork bomb
// started then would fill it, seen in the test VM). So work's memory must
// be at its limit too, which it leaves the instant the runaway dies. It
// reads work's memory.current and memory.pressure from descriptors kept
// open: each start reads them, and a pread costs less than an open.
type stallGauge struct {
	current, pressure int
	// atLimit is where work's memory counts as at its limit: within
	// half the spare's memory of work's memory.high (its memory.max when
	// the user has no swap), where a runaway is held.
	atLimit int64
	// fired is when the trigger last fired (UnixNano; 0: never);
	// trigger sets it (nil: not watching).
	fired   atomic.Int64
	trigger *psiTrigger
}

// openStallGauge opens work's files (dir), whose limit l gives; nil if
// the kernel has no memory.pressure (no PSI: every start goes to work,
// as before).
func openStallGauge(dir string, l CgroupLimits) *stallGauge {
	g := &stallGauge{current: -1, pressure: -1,
		atLimit: l.MemoryHigh - SpareMemory(l) - SpareMemory(l)/2}
	var err error
	if g.current, err = unix.Open(dir+"/memory.current", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		g.pressure, err = unix.Open(dir+"/memory.pressure", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		g.close()
		return nil
	}
	return g
}

// watch sets a PSI trigger on dir's memory.pressure and notes each time
// it fires (psitrigger.go). Without it (an error) the gauge has avg10
// alone.
func (g *stallGauge) watch(dir string) error {
	t, err := startPSITrigger(dir+"/memory.pressure", stallTrigger, stallWindow, func() bool {
		g.fired.Store(time.Now().UnixNano())
		return true
	}, nil)
	g.trigger = t
	return err
}

func (g *stallGauge) close() {
	if g == nil {
		return
	}
	g.trigger.close()
	for _, fd := range []int{g.current, g.pressure} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// stalled reports whether work is at its memory limit and stalled on
// memory now: the trigger fired within stallFresh, or avg10 is at least
// spareStallPercent. False when it cannot tell.
func (g *stallGauge) stalled() bool {
	if g == nil {
		return false
	}
	var b [256]byte
	n, err := unix.Pread(g.current, b[:], 0)
	if err != nil || n <= 0 {
		return false
	}
	cur, err := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	if err != nil || cur < g.atLimit {
		return false
	}
	if f := g.fired.Load(); f != 0 && time.Since(time.Unix(0, f)) < stallFresh {
		return true
	}
	if n, err = unix.Pread(g.pressure, b[:], 0); err != nil || n <= 0 {
		return false
	}
	avg, err := strconv.ParseFloat(psiValue(string(b[:n]), "some", "avg10"), 64)
	return err == nil && avg >= spareStallPercent
}
