package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The agent stays in charge of the sandbox: where cgroup v2 is mounted and
// writable, it moves itself into a cgroup of its own and starts all user
// work (commands, terminals, kernels, the processes of every surface)
// straight into the user cgroup, born there (clone3's CLONE_INTO_CGROUP),
// so nothing a user runs is outside it even for an instant. The user
// cgroup has limits (memory.high and memory.max leave the agent a
// reserve, pids.max stops a fork bomb) and a small CPU and IO weight next
// to the agent's, so a runaway cannot starve the agent, its health probes
// or a user's kill. One user cgroup rather than one per kind: one place to
// limit, to read and (for a pause) to freeze, and a kernel and the command
// feeding it share the user's budget as they would on a laptop.
//
// Inside it, user work starts in work, whose pids.max leaves a spare of
// tasks: once work is full (a fork bomb), a new command, terminal or
// kernel starts in spare instead, so the user can still run ps and kill.
// Work's memory.max leaves the spare memory the same way, and a start
// while work is stalled on memory goes there too (sparememory.go).
// A second runaway started there fills the spare too; then starts fail
// with a limit error until something ends.
//
// The layout, under the cgroup the agent started in (BASE: a fresh
// /rayito when that is the root):
//
//	BASE/agent       the agent (cpu.weight 10000, io.weight 1000, memory.min)
//	BASE/user        user work (memory.high, memory.max, pids.max, weights)
//	BASE/user/work   where user processes start (pids.max and memory.max:
//	                 the user's less the spare's)
//	BASE/user/work/p-N  a leaf of each process started there (leaves.go)
//	BASE/user/spare  where they start once work is full or stalled on
//	                 memory (pids.max: the spare, cpu.weight spareCPUWeight)
//	BASE/hooks       the lifecycle hooks (pids.max HookPids, the user's
//	                 memory.max): beside user work, not in it, so that a
//	                 hook starts even while a fork bomb holds every pid
//	                 the user has; frozen with it for a pause

// DefaultCgroupMount is where cgroup v2 is mounted.
const DefaultCgroupMount = "/sys/fs/cgroup"

// Weights and protection of the agent's own cgroup: far above user work
// (cgroup v2's default weight is 100).
const (
	agentCPUWeight = 10000
	agentIOWeight  = 1000
	// agentMemoryMin is memory the kernel does not reclaim from the agent
	// under pressure: its heap and stacks at rest.
	agentMemoryMin = 32 << 20
)

// Floors of the user limits: below them an ordinary command (a shell, a
// kernel) cannot run.
const (
	MinUserMemory = 64 << 20
	MinUserPids   = 32
)

// CgroupLimits are the user cgroup's limits; zero values are derived
// (UserLimitsFor).
type CgroupLimits struct {
	MemoryMax  int64 // bytes: the OOM killer acts beyond it
	MemoryHigh int64 // bytes: reclaim and throttling start beyond it
	PidsMax    int64 // tasks: a fork beyond it fails (EAGAIN)
	CPUWeight  int   // 1 to 10000
	IOWeight   int   // 1 to 10000
}

// spareCPUWeight is the spare's CPU weight next to work's 100: a command
// started there while a runaway fills work (ps, kill) gets most of the
// user's CPU at once.
const spareCPUWeight = 1000

// HookPids bounds the tasks of the hooks' cgroup: a few hooks at a time,
// one after another, and what they start.
const HookPids = 256

// DefaultUserPids bounds the user's tasks: plenty for a build's
// parallelism, few enough that a fork bomb leaves the agent room.
const DefaultUserPids = 4096

// SparePids is the part of the user's tasks kept for starts once work is
// full: a tenth, from 8 (a shell, ps, kill and a few more) to 64.
func SparePids(userPids int64) int64 { return min(max(userPids/10, 8), 64) }

// MachineMemory is what the machine has: its memory and swap, and how
// much of the memory was in use, not reclaimable, when the agent started
// (MemTotal less MemAvailable: the kernel, init, the agent).
type MachineMemory struct {
	Total, Swap, InUse int64
}

// UserLimitsFor fills in the zero limits for a machine with memory m: the
// agent keeps a reserve of what was in use at its start and an eighth of
// the memory besides, at least 64 MiB; user work may use the rest
// (memory.max). The memory in use counts: without it, in a 1 GiB VM
// whose kernel and init held 140 MiB, user work at 838 MiB of its 896
// left the machine 4 MiB, the page cache (the agent's own code among it)
// was thrown out and read back a thousand pages a second, and /health
// took seconds though user work had not met its limit. With swap it is throttled from 90% of that (memory.high),
// where the kernel can page it out; without, memory.high is memory.max:
// throttling memory that cannot be swapped only holds a runaway at the
// limit, crawling, for as long as it runs (one sat there for minutes
// instead of meeting the OOM killer). It refuses limits below their
// floors or above the machine.
func UserLimitsFor(l CgroupLimits, m MachineMemory) (CgroupLimits, error) {
	total, swap := m.Total, m.Swap
	reserve := max(m.InUse, 0) + max(total/8, 64<<20)
	if l.MemoryMax == 0 {
		l.MemoryMax = max(total-reserve, MinUserMemory)
	}
	if l.MemoryHigh == 0 {
		l.MemoryHigh = l.MemoryMax
		if swap > 0 {
			l.MemoryHigh = l.MemoryMax / 10 * 9
		}
	}
	if l.PidsMax == 0 {
		l.PidsMax = DefaultUserPids
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = 100
	}
	if l.IOWeight == 0 {
		l.IOWeight = 100
	}
	switch {
	case l.MemoryMax < MinUserMemory:
		return l, fmt.Errorf("--user-memory-max must be at least %d MiB, got %d bytes", MinUserMemory>>20, l.MemoryMax)
	case total > 0 && l.MemoryMax > total:
		return l, fmt.Errorf("--user-memory-max must be at most the machine's memory (%d MiB), got %d MiB", total>>20, l.MemoryMax>>20)
	case l.MemoryHigh < MinUserMemory || l.MemoryHigh > l.MemoryMax:
		return l, fmt.Errorf("--user-memory-high must be from %d MiB to --user-memory-max (%d MiB), got %d bytes", MinUserMemory>>20, l.MemoryMax>>20, l.MemoryHigh)
	case l.PidsMax < MinUserPids:
		return l, fmt.Errorf("--user-pids-max must be at least %d, got %d", MinUserPids, l.PidsMax)
	case l.CPUWeight < 1 || l.CPUWeight > 10000:
		return l, fmt.Errorf("--user-cpu-weight must be from 1 to 10000, got %d", l.CPUWeight)
	case l.IOWeight < 1 || l.IOWeight > 10000:
		return l, fmt.Errorf("--user-io-weight must be from 1 to 10000, got %d", l.IOWeight)
	}
	return l, nil
}

// Memory is the machine's memory, swap and memory in use, in bytes (0
// if unknown).
func Memory() MachineMemory {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return MachineMemory{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	kb := func(v string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		return n << 10
	}
	var m MachineMemory
	avail := int64(-1)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			m.Total = kb(v)
		} else if v, ok := strings.CutPrefix(sc.Text(), "SwapTotal:"); ok {
			m.Swap = kb(v)
		} else if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			avail = kb(v)
		}
	}
	if avail >= 0 {
		m.InUse = m.Total - avail
	}
	return m
}

// Cgroups is the agent's cgroup layout, or why there is none.
type Cgroups struct {
	// Off says why isolation is off ("" when it is on): no cgroup v2, a
	// read-only one, a kernel without a controller the layout needs.
	Off    string
	Limits CgroupLimits
	base   string
	agent  string
	user   string
	hooks  string
	// The directories of user/work, user/spare and hooks, for
	// CLONE_INTO_CGROUP.
	workFD, spareFD, hooksFD int
	// stall reads whether work is stalled on memory (sparememory.go);
	// nil without memory.pressure. StallOff says why its trigger is
	// off, if it is (the gauge then has the 10 s average alone).
	stall    *stallGauge
	StallOff string
	// spareStarts counts the starts the spare took (work full or
	// stalled).
	spareStarts atomic.Int64
	// leaves makes the cgroup of each process started in work
	// (leaves.go); nil where the kernel has no cpu controller, and
	// LeavesOff says why.
	leaves    *leaves
	LeavesOff string
	// guard, if running, kills when user work thrashes (memguard.go);
	// guardKills counts its kills.
	guard      *memoryGuard
	guardKills atomic.Int64
	// pguard, if running, kills runaway commands (procguard.go);
	// runawayKills counts its kills.
	pguard       *processGuard
	runawayKills atomic.Int64
}

// SetupCgroups makes the layout under mount (DefaultCgroupMount) and
// moves the agent into it, with limits l (filled in). It never fails:
// where the layout cannot be made, Off says why and nothing changes.
func SetupCgroups(mount string, l CgroupLimits) *Cgroups {
	return setupCgroups(mount, "rayito", l)
}

// setupCgroups is SetupCgroups with BASE named name where the agent
// starts in the root (tests use their own).
func setupCgroups(mount, name string, l CgroupLimits) *Cgroups {
	c := &Cgroups{Limits: l, workFD: -1, spareFD: -1, hooksFD: -1}
	if err := c.setup(mount, name); err != nil {
		c.Close()
		c.Off = err.Error()
	}
	return c
}

// Close stops the memory guard and releases the directories'
// descriptors (the cgroups stay).
func (c *Cgroups) Close() {
	if c.guard != nil {
		c.guard.close()
		c.guard = nil
	}
	if c.pguard != nil {
		c.pguard.close()
		c.pguard = nil
	}
	c.leaves.close()
	c.stall.close()
	c.stall = nil
	for _, fd := range []*int{&c.workFD, &c.spareFD, &c.hooksFD} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// On reports whether user work is isolated.
func (c *Cgroups) On() bool { return c != nil && c.Off == "" }

// StartFDs are the directory descriptors of the cgroups user processes
// start in (work, then spare once work is full); -1 when off.
func (c *Cgroups) StartFDs() (work, spare int) {
	if !c.On() {
		return -1, -1
	}
	return c.workFD, c.spareFD
}

// HooksFD is the directory descriptor of the hooks' cgroup; -1 when off.
func (c *Cgroups) HooksFD() int {
	if !c.On() {
		return -1
	}
	return c.hooksFD
}

// UserDir is the user cgroup's directory, "" when off.
func (c *Cgroups) UserDir() string {
	if !c.On() {
		return ""
	}
	return c.user
}

func (c *Cgroups) setup(mount, name string) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(mount, &sfs); err != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("no cgroup v2 mounted at %s (cgroup v1, or none)", mount)
	}
	own, err := ownCgroup()
	if err != nil {
		return err
	}
	base := filepath.Join(mount, own)
	if own == "/" {
		// The root holds init and everything else: a layout of our own.
		base = filepath.Join(mount, name)
	}
	var avail []string
	if own == "/" {
		// The root may hand controllers to its children though it holds
		// processes; what it hands is what BASE can use.
		have, err := readFields(filepath.Join(mount, "cgroup.controllers"))
		if err != nil {
			return fmt.Errorf("reading the controllers of %s: %w", mount, err)
		}
		enable(mount, intersect(have, "memory", "pids", "cpu", "io")...)
		avail, err = readFields(filepath.Join(mount, "cgroup.subtree_control"))
		if err != nil {
			return fmt.Errorf("reading the controllers of %s: %w", mount, err)
		}
	} else if avail, err = readFields(filepath.Join(base, "cgroup.controllers")); err != nil {
		return fmt.Errorf("reading the controllers of %s: %w", base, err)
	}
	for _, need := range []string{"memory", "pids"} {
		if !slices.Contains(avail, need) {
			return fmt.Errorf("cgroup v2 at %s lacks the %s controller for the agent's cgroup", mount, need)
		}
	}
	c.base, c.agent, c.user, c.hooks = base, filepath.Join(base, "agent"), filepath.Join(base, "user"), filepath.Join(base, "hooks")
	for _, d := range []string{base, c.agent, c.user, c.hooks} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup v2 at %s is not writable: %w", mount, err)
		}
	}
	// The agent leaves BASE first: a cgroup that hands controllers to its
	// children may hold no process itself.
	if err := write(filepath.Join(c.agent, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("moving the agent into %s: %w", c.agent, err)
	}
	wanted := intersect(avail, "memory", "pids", "cpu", "io")
	if err := enable(base, wanted...); err != nil {
		return fmt.Errorf("enabling %s in %s (another process in it?): %w", strings.Join(wanted, ", "), base, err)
	}
	// user hands pids to work and spare: it holds no process itself.
	for _, d := range []string{"work", "spare"} {
		if err := os.Mkdir(filepath.Join(c.user, d), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("making %s: %w", filepath.Join(c.user, d), err)
		}
	}
	// With cpu, work and spare have CPU shares of their own, and so do
	// the leaves in work; with memory, work leaves the spare memory of
	// its own (sparememory.go).
	userControllers := intersect(avail, "memory", "pids", "cpu")
	if err := enable(c.user, userControllers...); err != nil {
		return fmt.Errorf("enabling %s in %s (another process in it?): %w", strings.Join(userControllers, ", "), c.user, err)
	}
	for _, s := range c.limitFiles() {
		if _, err := os.Stat(s.file); err != nil && s.optional {
			continue
		}
		if err := write(s.file, s.value); err != nil {
			return fmt.Errorf("setting %s to %s: %w", s.file, s.value, err)
		}
	}
	// An agent that died during a pause left user work frozen: thaw it.
	if err := c.ThawUser(); err != nil {
		return err
	}
	for _, d := range []struct {
		dir string
		fd  *int
	}{{filepath.Join(c.user, "work"), &c.workFD}, {filepath.Join(c.user, "spare"), &c.spareFD}, {c.hooks, &c.hooksFD}} {
		fd, err := unix.Open(d.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", d.dir, err)
		}
		*d.fd = fd
	}
	work := filepath.Join(c.user, "work")
	if c.stall = openStallGauge(work, c.Limits); c.stall != nil {
		if err := c.stall.watch(work); err != nil {
			c.StallOff = err.Error()
		}
	}
	if !slices.Contains(userControllers, "cpu") {
		c.LeavesOff = "the kernel has no cpu controller for " + c.user
	} else if c.leaves, err = newLeaves(filepath.Join(c.user, "work")); err != nil {
		c.LeavesOff = err.Error()
	}
	return nil
}

// limitFile is one value the layout writes: optional where its
// controller may be missing.
type limitFile struct {
	file, value string
	optional    bool
}

// limitFiles is what the layout writes into its limit files, from
// c.Limits: the user's memory and tasks, split between work and the
// spare (which keeps SparePids and SpareMemory for starts once work is
// full or stalled), the hooks' bounds, and the weights that put the
// agent first.
func (c *Cgroups) limitFiles() []limitFile {
	l := c.Limits
	spare, spareMem := SparePids(l.PidsMax), SpareMemory(l)
	workHigh := "max" // the user's memory.high is its memory.max
	if l.MemoryHigh < l.MemoryMax {
		workHigh = strconv.FormatInt(l.MemoryHigh-spareMem, 10)
	}
	return []limitFile{
		{filepath.Join(c.user, "memory.max"), strconv.FormatInt(l.MemoryMax, 10), false},
		{filepath.Join(c.user, "memory.high"), strconv.FormatInt(l.MemoryHigh, 10), false},
		{filepath.Join(c.user, "work", "memory.max"), strconv.FormatInt(l.MemoryMax-spareMem, 10), false},
		{filepath.Join(c.user, "work", "memory.high"), workHigh, false},
		{filepath.Join(c.user, "pids.max"), strconv.FormatInt(l.PidsMax, 10), false},
		{filepath.Join(c.user, "work", "pids.max"), strconv.FormatInt(l.PidsMax-spare, 10), false},
		{filepath.Join(c.user, "spare", "pids.max"), strconv.FormatInt(spare, 10), false},
		{filepath.Join(c.hooks, "pids.max"), strconv.Itoa(HookPids), false},
		{filepath.Join(c.hooks, "memory.max"), strconv.FormatInt(l.MemoryMax, 10), false},
		{filepath.Join(c.agent, "memory.min"), strconv.Itoa(agentMemoryMin), true},
		{filepath.Join(c.user, "cpu.weight"), strconv.Itoa(l.CPUWeight), true},
		{filepath.Join(c.agent, "cpu.weight"), strconv.Itoa(agentCPUWeight), true},
		{filepath.Join(c.user, "io.weight"), "default " + strconv.Itoa(l.IOWeight), true},
		{filepath.Join(c.user, "spare", "cpu.weight"), strconv.Itoa(spareCPUWeight), true},
		{filepath.Join(c.agent, "io.weight"), "default " + strconv.Itoa(agentIOWeight), true},
	}
}

// ownCgroup is the agent's cgroup v2 path ("/" for the root).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("the agent is in no cgroup v2 (a cgroup v1 system)")
}

// enable hands controllers to the children of dir (those the kernel has).
func enable(dir string, controllers ...string) error {
	var b strings.Builder
	for i, c := range controllers {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	return write(filepath.Join(dir, "cgroup.subtree_control"), b.String())
}

func write(file, value string) error {
	return os.WriteFile(file, []byte(value), 0)
}

func readFields(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// intersect is the names that are in have, in the order given.
func intersect(have []string, names ...string) []string {
	var out []string
	for _, n := range names {
		if slices.Contains(have, n) {
			out = append(out, n)
		}
	}
	return out
}
