package resume

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// kernelTable is a Kernels whose answers the test sets: the sequence's
// own logic is under test here; the real kernel check is tested with real
// kernels in the jupyter package and end to end.
type kernelTable struct {
	mu     sync.Mutex
	states map[string]string
	checks int
}

func (k *kernelTable) Check(ctx context.Context) []KernelHealth {
	k.mu.Lock()
	k.checks++
	k.mu.Unlock()
	return k.List()
}

func (k *kernelTable) List() []KernelHealth {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []KernelHealth
	for id, s := range k.states {
		out = append(out, KernelHealth{Kernel: id, State: s})
	}
	return out
}

type cutRecorder struct{ gens []uint64 }

func (c *cutRecorder) CutForResume(ctx context.Context, gen uint64) { c.gens = append(c.gens, gen) }

func TestResumeBumpsOncePerResumeID(t *testing.T) {
	cuts := &cutRecorder{}
	m, err := New(Options{StateDir: t.TempDir(), Sessions: cuts, SetClock: func(time.Time) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if g := m.Generation(); g != 0 {
		t.Fatalf("fresh state generation %d", g)
	}
	s := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "r1"})
	if s.Generation != 1 || s.LastResume == nil || s.LastResume.Source != SourceHost {
		t.Fatalf("after first resume: %+v", s)
	}
	again := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "r1"})
	if again.Generation != 1 {
		t.Fatalf("repeated resume_id bumped to %d", again.Generation)
	}
	// The host reporting again with a new id is a new resume, even at once.
	if s := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "r2"}); s.Generation != 2 {
		t.Fatalf("second resume: generation %d", s.Generation)
	}
	if len(cuts.gens) != 2 || cuts.gens[0] != 1 || cuts.gens[1] != 2 {
		t.Fatalf("sessions cut for %v, want [1 2]", cuts.gens)
	}
}

func TestDetectorsOfOneResumeAreDeduplicated(t *testing.T) {
	m, err := New(Options{SetClock: func(time.Time) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.Resume(ctx, Report{Source: SourceVMGenID})
	m.Resume(ctx, Report{Source: SourceClock})
	s := m.Resume(ctx, Report{Source: SourceHost, ResumeID: "x"})
	if s.Generation != 1 {
		t.Fatalf("three detectors of one resume gave generation %d", s.Generation)
	}
	// The uevent of the next restore is a new resume: vmgenid already
	// reported the first one.
	if s := m.Resume(ctx, Report{Source: SourceVMGenID}); s.Generation != 2 {
		t.Fatalf("next restore: generation %d", s.Generation)
	}
	if s := m.Resume(ctx, Report{Source: SourceHost, ResumeID: "y"}); s.Generation != 2 {
		t.Fatalf("host report of the next restore bumped again: %d", s.Generation)
	}
}

func TestConcurrentReportsBumpOnce(t *testing.T) {
	m, _ := New(Options{})
	var wg sync.WaitGroup
	for _, src := range []Source{SourceHost, SourceVMGenID, SourceVMClock, SourceClock} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Resume(context.Background(), Report{Source: src})
		}()
	}
	wg.Wait()
	if g := m.Generation(); g != 1 {
		t.Fatalf("4 detectors at once gave generation %d", g)
	}
}

func TestKernelLossIsReportedAndPublishedWithGeneration(t *testing.T) {
	k := &kernelTable{states: map[string]string{"k1": "alive", "k2": "lost"}}
	m, _ := New(Options{Kernels: k})
	s := m.Resume(context.Background(), Report{Source: SourceHost})
	if !s.KernelStateLost || s.Generation != 1 || k.checks != 1 {
		t.Fatalf("state %+v after %d checks", s, k.checks)
	}
	k.mu.Lock()
	k.states = map[string]string{"k1": "alive"}
	k.mu.Unlock()
	if s := m.Resume(context.Background(), Report{Source: SourceHost}); s.KernelStateLost {
		t.Fatalf("a resume that lost nothing still reports a loss: %+v", s)
	}
}

func TestColdBootBumpsAndReportsKernelsLost(t *testing.T) {
	dir := t.TempDir()
	m, _ := New(Options{StateDir: dir})
	m.Resume(context.Background(), Report{Source: SourceHost})
	m.SaveKernels([]string{"k1", "k2"})
	// A cold boot: the state file says another boot.
	p, _, err := loadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	p.BootID = "another-boot"
	if err := saveState(dir, p); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := m2.State()
	if s.Generation != 2 || !s.KernelStateLost || len(s.Kernels) != 2 || s.Kernels[0].State != "lost" || s.LastResume.Source != SourceBoot {
		t.Fatalf("after cold boot: %+v", s)
	}
	// An agent restart within the same boot keeps the generation.
	m3, _ := New(Options{StateDir: dir})
	if s := m3.State(); s.Generation != 2 {
		t.Fatalf("restart in the same boot changed generation to %d", s.Generation)
	}
}

func TestCorruptStateIsAnError(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, stateFile), []byte("{not json"), 0o600)
	if _, err := New(Options{StateDir: dir}); err == nil {
		t.Fatal("corrupt state file accepted")
	}
}

func TestClockIsSetFromHostTime(t *testing.T) {
	var got atomic.Int64
	m, _ := New(Options{SetClock: func(t time.Time) error { got.Store(t.UnixNano()); return nil }})
	const host = 1796000000000000000
	m.Resume(context.Background(), Report{Source: SourceHost, TimeUnixNs: host})
	if d := time.Duration(got.Load() - host); d < 0 || d > time.Second {
		t.Fatalf("clock set to %d, %s after the host's time", got.Load(), d)
	}
}

// slowKernels holds the kernel check until release is closed.
type slowKernels struct {
	checking chan struct{} // closed when the check started
	release  chan struct{}
}

func (k *slowKernels) Check(ctx context.Context) []KernelHealth {
	close(k.checking)
	<-k.release
	return nil
}

func (k *slowKernels) List() []KernelHealth { return nil }

// A host's report that waits behind a resume in progress (a slow kernel
// check) sets the clock to its time plus the wait, not to a time that is
// as old as the wait.
func TestHostTimeCountsTheWait(t *testing.T) {
	var got atomic.Int64
	k := &slowKernels{checking: make(chan struct{}), release: make(chan struct{})}
	m, _ := New(Options{Kernels: k, Machine: Machine{KernelCheck: time.Minute}, SetClock: func(t time.Time) error { got.Store(t.UnixNano()); return nil }})
	detected := make(chan struct{})
	go func() {
		defer close(detected)
		m.Resume(context.Background(), Report{Source: SourceClock})
	}()
	<-k.checking
	host := time.Now()
	answered := make(chan State, 1)
	go func() {
		answered <- m.Resume(context.Background(), Report{Source: SourceHost, TimeUnixNs: host.UnixNano()})
	}()
	const wait = 2 * time.Second
	time.Sleep(wait)
	close(k.release)
	<-detected
	if s := <-answered; s.Generation != 1 {
		t.Fatalf("the host's report of the same restore made generation %d", s.Generation)
	}
	// The report arrived right after host and waited about wait; a
	// loaded machine may start its goroutine late, hence half of it.
	if set := time.Unix(0, got.Load()); set.Sub(host) < wait/2 {
		t.Errorf("clock set to %s, %s after the host's time, which came %s before the report got its turn",
			set.Format(time.RFC3339Nano), set.Sub(host), wait)
	}
}

func TestUeventParsing(t *testing.T) {
	msg := []byte("change@/devices/LNXSYSTM:00/LNXSYBUS:00/QEMUVGID:00\x00ACTION=change\x00DEVPATH=/devices/LNXSYSTM:00/LNXSYBUS:00/QEMUVGID:00\x00SUBSYSTEM=acpi\x00NEW_VMGENID=1\x00SEQNUM=1234\x00")
	if !IsVMGenIDChange(msg) {
		t.Fatal("vmgenid uevent not recognised")
	}
	if IsVMGenIDChange([]byte("add@/devices/virtual/net/lo\x00ACTION=add\x00NEW_VMGENID=0\x00")) {
		t.Fatal("unrelated uevent taken for a resume")
	}
}

func TestUeventListenerOpens(t *testing.T) {
	l, err := ListenUevents(func() {})
	if err != nil {
		t.Skipf("no uevent socket here: %v", err)
	}
	l.Close()
}

// fakeClocks lets the test move the RTC and boottime offsets.
type fakeClocks struct {
	mu        sync.Mutex
	rtc, boot time.Duration
}

func (f *fakeClocks) Read() (time.Duration, bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rtc, true, f.boot
}

func (f *fakeClocks) set(rtc, boot time.Duration) {
	f.mu.Lock()
	f.rtc, f.boot = rtc, boot
	f.mu.Unlock()
}

func TestClockJumpDetector(t *testing.T) {
	clocks := &fakeClocks{}
	var fired atomic.Int32
	core, logs := observer.New(zap.InfoLevel)
	d := watchClocks(clocks, zap.New(core), time.Hour, func() { fired.Add(1) }) // checked by hand below
	defer d.Close()
	clocks.set(1500*time.Millisecond, 0) // RTC resolution noise
	if d.Check() {
		t.Fatal("1.5 s of RTC noise fired the detector")
	}
	clocks.set(42*time.Second, 0) // the VM was down for 42 s
	if !d.Check() {
		t.Fatal("42 s RTC jump not detected")
	}
	if d.Check() {
		t.Fatal("one jump fired twice")
	}
	clocks.set(42*time.Second, 10*time.Second) // a system suspend
	if !d.Check() {
		t.Fatal("boottime jump not detected")
	}
	// The agent setting the clock itself is not a jump.
	d.SetClock(func(time.Time) error { clocks.set(0, 10*time.Second); return nil }, time.Now())
	if d.Check() {
		t.Fatal("the agent's own clock change was taken for a resume")
	}
	if fired.Load() != 2 {
		t.Fatalf("report called %d times, want 2", fired.Load())
	}
	// Each jump is logged with the offsets that moved.
	jumps := logs.FilterMessage("clock jump").All()
	if len(jumps) != 2 {
		t.Fatalf("%d jumps logged, want 2: %+v", len(jumps), logs.All())
	}
	if f := jumps[0].ContextMap(); f["rtc_offset_was"] != time.Duration(0) || f["rtc_offset"] != 42*time.Second {
		t.Errorf("first jump logged with %v, want the RTC offset from 0 to 42s", f)
	}
	if f := jumps[1].ContextMap(); f["boot_offset_was"] != time.Duration(0) || f["boot_offset"] != 10*time.Second {
		t.Errorf("second jump logged with %v, want the boot offset from 0 to 10s", f)
	}
}

// TestHostResumeAbsorbsTheClockJump: the host reports a restore before
// the clock detector's next tick; the resume takes new baselines, so the
// detector does not report the same jump later (it would read as a
// restore of whatever pause came next). A later jump still reports.
func TestHostResumeAbsorbsTheClockJump(t *testing.T) {
	clocks := &fakeClocks{}
	var fired atomic.Int32
	d := watchClocks(clocks, nil, time.Hour, func() { fired.Add(1) }) // checked by hand below
	defer d.Close()
	m, err := New(Options{StateDir: t.TempDir(), SetClock: func(time.Time) error { return nil }, Machine: Machine{Rebaseline: d.Rebaseline}})
	if err != nil {
		t.Fatal(err)
	}
	clocks.set(42*time.Second, 0) // restored after 42 s down
	if st := m.Resume(context.Background(), Report{Source: SourceHost}); st.Generation != 1 {
		t.Fatalf("host resume: %+v", st)
	}
	if d.Check() || fired.Load() != 0 {
		t.Fatal("the jump of a restore the host reported was reported again")
	}
	clocks.set(90*time.Second, 0) // the next restore
	if !d.Check() {
		t.Fatal("the next restore's jump was not detected")
	}
}

func TestSystemClocksRead(t *testing.T) {
	_, _, boot := systemClocks{}.Read()
	if boot < 0 {
		t.Fatalf("boottime behind monotonic by %v", boot)
	}
}

func TestKernelThatDiedSinceLastResumeCountsAsLost(t *testing.T) {
	k := &kernelTable{states: map[string]string{"k1": "dead", "k2": "alive"}}
	m, _ := New(Options{Kernels: k})
	if s := m.Resume(context.Background(), Report{Source: SourceHost}); !s.KernelStateLost {
		t.Fatalf("a kernel that died during the pause is not reported lost: %+v", s)
	}
	if s := m.Resume(context.Background(), Report{Source: SourceHost}); s.KernelStateLost {
		t.Fatalf("a kernel dead before the previous resume is reported lost again: %+v", s)
	}
}

func TestKernelLostThenDeadIsReportedOnce(t *testing.T) {
	k := &kernelTable{states: map[string]string{"k1": "lost"}}
	m, _ := New(Options{Kernels: k})
	if s := m.Resume(context.Background(), Report{Source: SourceHost}); !s.KernelStateLost {
		t.Fatalf("lost kernel not reported: %+v", s)
	}
	k.mu.Lock()
	k.states["k1"] = "dead" // the frozen kernel's death was noticed later
	k.mu.Unlock()
	if s := m.Resume(context.Background(), Report{Source: SourceHost}); s.KernelStateLost {
		t.Fatalf("a kernel reported lost at the previous resume is reported again: %+v", s)
	}
}

// The host's report of a restore the guest noticed by itself belongs to
// that restore however late it comes (16 s after, under software
// emulation); the host's next report is a new resume.
func TestLateHostReportIsTheSameResume(t *testing.T) {
	m, _ := New(Options{SetClock: func(time.Time) error { return nil }})
	if s := m.Resume(context.Background(), Report{Source: SourceClock}); s.Generation != 1 {
		t.Fatalf("detected: %+v", s)
	}
	m.mu.Lock()
	m.dedup.at = m.dedup.at.Add(-16 * time.Second)
	m.mu.Unlock()
	if s := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "r1"}); s.Generation != 1 {
		t.Fatalf("the host's report 16 s after the guest noticed the restore: generation %d, want 1", s.Generation)
	}
	if s := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "r2"}); s.Generation != 2 {
		t.Fatalf("the host's next report: generation %d, want 2", s.Generation)
	}
	// A guest detector's late report is a new resume, as before.
	m.mu.Lock()
	m.dedup.at = m.dedup.at.Add(-16 * time.Second)
	m.mu.Unlock()
	if s := m.Resume(context.Background(), Report{Source: SourceVMGenID}); s.Generation != 3 {
		t.Fatalf("a VMGenID report 16 s after the host's: generation %d, want 3", s.Generation)
	}
}

// A kernel alive but slow to answer the check is not lost: health says
// slow, kernel_state_lost stays false, unless it never answers (the
// jupyter manager then reports it through KernelLost).
func TestSlowKernelIsNotLost(t *testing.T) {
	k := &kernelTable{states: map[string]string{"k1": "slow", "k2": "alive"}}
	m, _ := New(Options{Kernels: k})
	s := m.Resume(context.Background(), Report{Source: SourceHost})
	if s.KernelStateLost {
		t.Fatalf("a slow kernel made the resume lose kernel state: %+v", s)
	}
	found := false
	for _, kh := range s.Kernels {
		found = found || kh.Kernel == "k1" && kh.State == "slow"
	}
	if !found {
		t.Fatalf("health does not say k1 is slow: %+v", s.Kernels)
	}
	m.KernelLost("k1")
	if s := m.State(); !s.KernelStateLost {
		t.Fatalf("a slow kernel that never answered is not reported lost: %+v", s)
	}
	m.KernelLost("k1") // once
	k.mu.Lock()
	k.states["k1"] = "lost"
	k.mu.Unlock()
	if s := m.Resume(context.Background(), Report{Source: SourceHost}); s.KernelStateLost {
		t.Fatalf("a kernel lost at the previous resume is reported again: %+v", s)
	}
}

// A thread descheduled between the two reads of an offset, as on a loaded
// machine, must not look like a restore: the detector keeps quiet.
func TestLoadedMachineIsNotAClockJump(t *testing.T) {
	t.Parallel()
	rtc := filepath.Join(t.TempDir(), "since_epoch")
	tickRTC := func() {
		os.WriteFile(rtc, []byte(strconv.FormatInt(time.Now().Unix(), 10)+"\n"), 0o600)
	}
	tickRTC()
	var stall [2]atomic.Bool
	clocks := systemClocks{rtc: rtc, pause: func(pair int) {
		if stall[pair].CompareAndSwap(true, false) { // once in each pair
			time.Sleep(clockThreshold + 200*time.Millisecond)
			tickRTC()
		}
	}}
	if _, ok, _ := clocks.Read(); !ok {
		t.Fatal("the test RTC is not read")
	}
	var fired atomic.Int32
	d := watchClocks(clocks, nil, time.Hour, func() { fired.Add(1) }) // checked by hand below
	defer d.Close()
	stall[0].Store(true)
	stall[1].Store(true)
	if d.Check() || fired.Load() != 0 {
		t.Fatal("a stalled read of the clocks was taken for a restore")
	}
	// A real jump is still seen.
	os.WriteFile(rtc, []byte(strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)+"\n"), 0o600)
	if !d.Check() {
		t.Fatal("a 60 s RTC jump was not seen")
	}
}

// A damaged state file (a torn write, zeroes after a crash, an empty JSON
// value) is an error naming the file, never a silent reset of the
// generation, and the file is left for the operator.
func TestDamagedStateIsAnErrorAndKept(t *testing.T) {
	good, err := json.Marshal(persisted{Generation: 7, BootID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"torn":   good[:len(good)/2],
		"empty":  {},
		"zeroes": make([]byte, 64),
		"null":   []byte("null"),
		"object": []byte("{}"),
		"no gen": []byte(`{"boot_id":"b","kernels":[]}`),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, stateFile)
			os.WriteFile(path, body, 0o600)
			m, err := New(Options{StateDir: dir})
			if err == nil {
				t.Fatalf("damaged state %q accepted: generation %d", body, m.Generation())
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, body) {
				t.Fatalf("the damaged file was rewritten to %q", b)
			}
		})
	}
}

// Saves replace the file whole and leave no temporary file behind; a
// failed save keeps the previous state.
func TestStateSaveIsAtomic(t *testing.T) {
	dir := t.TempDir()
	m, err := New(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 20 {
				m.SaveKernels([]string{"k" + strconv.Itoa(i)})
			}
		})
	}
	for range 200 {
		if _, _, err := loadState(dir); err != nil {
			t.Fatalf("a reader saw a partial state: %v", err)
		}
	}
	wg.Wait()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("state dir holds %d files, want only %s", len(ents), stateFile)
	}
	// A directory in the way of the temporary file's rename: the save
	// fails and the old state stays.
	os.Remove(filepath.Join(dir, stateFile))
	os.Mkdir(filepath.Join(dir, stateFile), 0o700)
	os.WriteFile(filepath.Join(dir, stateFile, "x"), nil, 0o600)
	if err := saveState(dir, persisted{Generation: 9, BootID: "b"}); err == nil {
		t.Fatal("save over a directory succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("a failed save left %d files", len(ents))
	}
}
