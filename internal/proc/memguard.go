package proc

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The kernel's OOM killer acts only when reclaim makes no progress. User
// work at memory.max whose working set does not fit can thrash instead:
// reclaim evicts file pages (the hog's own code) that are read straight
// back, which counts as progress, so nothing is killed and the hog crawls
// at the limit for as long as it runs (seen in the test VM: 18 minutes at
// 64 MiB, user work fully stalled on memory 47% of the time, its memory
// never freed for the user's other programs). The memory guard ends that
// as the OOM killer would have, as systemd-oomd does for a desktop: once
// some of user work has been stalled on memory (memory.pressure's "some")
// for a share of a whole span, it kills the user process with the highest
// oom_score (the kernel's own choice of victim), and that process ends
// oom_killed. "some", not "full": each command is a leaf with a CPU share
// of its own (leaves.go), so busy loops beside a thrashing hog keep
// running, and user work as a whole is never fully stalled; the hog
// thrashed for minutes unkilled. Waiting costs nothing: the kernel wakes the guard (a PSI
// trigger) only once stalls begin.

// MemoryGuard says when the guard kills: some of user work stalled for at
// least Share (0 to 1) of the last For. Off turns it off.
type MemoryGuard struct {
	Share float64
	For   time.Duration
	Off   bool
}

// DefaultMemoryGuard: between the thrash measured (47%, on an emulated
// CPU that also stalls for other reasons) and systemd-oomd's 60%, for
// its 30 s.
var DefaultMemoryGuard = MemoryGuard{Share: 0.4, For: 30 * time.Second}

// Bounds of the guard's settings: a shorter span or smaller share would
// kill a build that merely pages for a moment.
const (
	MinGuardFor   = 10 * time.Second
	MaxGuardFor   = 10 * time.Minute
	MinGuardShare = 0.1
)

// ParseMemoryGuard reads "off" or "SHARE%/SPAN", such as "40%/30s".
func ParseMemoryGuard(s string) (MemoryGuard, error) {
	if s == "off" {
		return MemoryGuard{Off: true}, nil
	}
	share, span, ok := strings.Cut(s, "/")
	pct, err := strconv.ParseFloat(strings.TrimSuffix(share, "%"), 64)
	if !ok || err != nil || !strings.HasSuffix(share, "%") {
		return MemoryGuard{}, fmt.Errorf("must be off or SHARE%%/SPAN such as 40%%/30s, got %q", s)
	}
	d, err := time.ParseDuration(span)
	if err != nil {
		return MemoryGuard{}, fmt.Errorf("must be off or SHARE%%/SPAN such as 40%%/30s, got %q", s)
	}
	g := MemoryGuard{Share: pct / 100, For: d}
	if g.Share < MinGuardShare || g.Share > 1 || g.For < MinGuardFor || g.For > MaxGuardFor {
		return g, fmt.Errorf("wants a share from %.0f%% to 100%% and a span from %v to %v, got %q", MinGuardShare*100, MinGuardFor, MaxGuardFor, s)
	}
	return g, nil
}

// String is the setting as ParseMemoryGuard reads it.
func (g MemoryGuard) String() string {
	if g.Off {
		return "off"
	}
	return strconv.FormatFloat(g.Share*100, 'f', -1, 64) + "%/" + g.For.String()
}

// memoryGuard watches the user cgroup's memory.pressure.
type memoryGuard struct {
	c    *Cgroups
	ooms *OOMKills
	log  *zap.Logger
	g    MemoryGuard
	// trigger wakes the guard once user work stalls (psitrigger.go);
	// done is closed by Close for the sampling.
	trigger *psiTrigger
	done    chan struct{}
}

// guardSample is how often stalls are read once the trigger fired.
const guardSample = time.Second

// GuardMemory starts the memory guard on c's user cgroup (nothing where
// isolation is off or g.Off). Victims are noted in ooms so their ends say
// oom_killed. Close stops it.
func (c *Cgroups) GuardMemory(g MemoryGuard, ooms *OOMKills, log *zap.Logger) error {
	if !c.On() || g.Off {
		return nil
	}
	if log == nil {
		log = zap.NewNop()
	}
	file := filepath.Join(c.user, "memory.pressure")
	m := &memoryGuard{c: c, ooms: ooms, log: log, g: g, done: make(chan struct{})}
	// The trigger fires at half the kill's share in a 10 s window (the
	// longest the kernel takes), so the sampling starts in time.
	const window = 10 * time.Second
	t, err := startPSITrigger(file, time.Duration(g.Share/2*float64(window)), window, m.sample, func(err error) {
		if err != nil {
			log.Warn("the memory guard stopped", zap.Error(err))
		}
	})
	if err != nil {
		return fmt.Errorf("the memory guard needs %s (a kernel with PSI): %w", file, err)
	}
	m.trigger = t
	c.guard = m
	return nil
}

// close stops the guard: a sampling in progress first, then the wait.
func (m *memoryGuard) close() {
	close(m.done)
	m.trigger.close()
}

// stallSample is the cumulative "some" stall (µs) at a moment.
type stallSample struct {
	at    time.Time
	total int64
}

// sample reads the stall every guardSample: it kills once the
// stalled share of the last For is at least Share, and returns when the
// share of the last 10 s (For if shorter) fell below it, even if the
// whole span's is still high: the stalls have eased (false when the guard
// is closed). A kill by the kernel starts the span again.
func (m *memoryGuard) sample() bool {
	file := filepath.Join(m.c.user, "memory.pressure")
	events := filepath.Join(m.c.user, "memory.events")
	var samples []stallSample
	kills := keyed(events, "oom_kill")
	t := time.NewTicker(guardSample)
	defer t.Stop()
	for {
		now := time.Now()
		if k := keyed(events, "oom_kill"); k != kills {
			// The kernel killed meanwhile: the stalls before were the
			// victim's. Judge what comes after on its own.
			kills, samples = k, nil
		}
		samples = append(samples, stallSample{now, pressureTotal(file, "some")})
		share := func(d time.Duration) (float64, bool) {
			first := samples[0]
			for _, s := range samples {
				if now.Sub(s.at) <= d {
					first = s
					break
				}
			}
			span := now.Sub(first.at)
			if span < d-guardSample/2 {
				return 0, false // not yet a whole span
			}
			return float64(samples[len(samples)-1].total-first.total) / float64(span/time.Microsecond), true
		}
		recent, whole := share(min(10*time.Second, m.g.For))
		if whole && recent < m.g.Share {
			return true // eased: back to waiting for the trigger
		}
		// Stalled for the whole span, and still now.
		if s, whole := share(m.g.For); whole && s >= m.g.Share {
			m.kill(s)
			return true
		}
		// Keep what the longest span needs.
		for len(samples) > 1 && now.Sub(samples[1].at) > m.g.For {
			samples = samples[1:]
		}
		select {
		case <-m.done:
			return false
		case <-t.C:
		}
	}
}

// kill ends the user process with the highest oom_score.
func (m *memoryGuard) kill(share float64) {
	pid, score := m.victim()
	if pid == 0 {
		return
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone meanwhile
	}
	defer unix.Close(pidfd)
	name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	m.ooms.noteKill(pid)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil {
		return
	}
	m.c.guardKills.Add(1)
	m.log.Warn("the memory guard killed a user process: user work thrashed at its memory limit",
		zap.Int("pid", pid), zap.String("name", strings.TrimSpace(string(name))), zap.Int("oom_score", score),
		zap.String("stalled", fmt.Sprintf("%.0f%% of %v", share*100, m.g.For)))
}

// victim is the user process with the highest oom_score, as the kernel's
// OOM killer would choose (0 if none).
func (m *memoryGuard) victim() (pid, score int) {
	for _, p := range cgroupPids(m.c.user) {
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score", p))
		if err != nil {
			continue
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(string(s))); n > score || pid == 0 {
			pid, score = p, n
		}
	}
	return pid, score
}

// cgroupPids lists the processes of the cgroup dir and of every cgroup
// below it (work's leaves, spare).
func cgroupPids(dir string) []int {
	var pids []int
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
		return nil
	})
	return pids
}
