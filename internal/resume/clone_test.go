package resume

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// orderRecorder is a Rekeyer and a KernelReseeder that record, at each
// call, the generation the manager published then.
type orderRecorder struct {
	m     func() *Manager
	mu    sync.Mutex
	steps []string
	hosts [][]byte
}

func (o *orderRecorder) Rekey(host []byte) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.steps = append(o.steps, "rekey@"+itoa(o.m().Generation()))
	o.hosts = append(o.hosts, append([]byte(nil), host...))
	src := []string{EntropyTime}
	if len(host) > 0 {
		src = append([]string{EntropyHost}, src...)
	}
	return src, nil
}

func (o *orderRecorder) Unable() error { return nil }

func (o *orderRecorder) Reseed(ctx context.Context) ([]string, []KernelNotReseeded) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.steps = append(o.steps, "kernels@"+itoa(o.m().Generation()))
	return []string{"k1"}, []KernelNotReseeded{{Kernel: "k2", Reason: "not a Python kernel (R)"}}
}

type orderKernels struct {
	kernelTable
	o *orderRecorder
}

func (k *orderKernels) Check(ctx context.Context) []KernelHealth {
	k.o.mu.Lock()
	k.o.steps = append(k.o.steps, "check@"+itoa(k.o.m().Generation()))
	k.o.mu.Unlock()
	return k.kernelTable.Check(ctx)
}

type orderCuts struct{ o *orderRecorder }

func (c orderCuts) CutForResume(ctx context.Context, gen uint64) {
	c.o.mu.Lock()
	c.o.steps = append(c.o.steps, "cut@"+itoa(gen))
	c.o.mu.Unlock()
}

// TestRekeyComesFirst: a resume re-keys the CRNG before the kernel check,
// reseeds the kernels after it, and both happen before the new generation
// is published and before the answer, which reports them.
func TestRekeyComesFirst(t *testing.T) {
	var m *Manager
	o := &orderRecorder{m: func() *Manager { return m }}
	ks := &orderKernels{kernelTable: kernelTable{states: map[string]string{"k1": "alive", "k2": "alive"}}, o: o}
	var err error
	m, err = New(Options{Reseed: true, CRNG: o, KernelReseed: o, Kernels: ks, Sessions: orderCuts{o}, SetClock: func(time.Time) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	host := bytes.Repeat([]byte{7}, 32)
	st := m.Resume(context.Background(), Report{Source: SourceHost, Entropy: host})
	if want := []string{"rekey@0", "check@0", "kernels@0", "cut@1"}; !slices.Equal(o.steps, want) {
		t.Fatalf("steps %v, want %v", o.steps, want)
	}
	lr := st.LastResume
	if !lr.Reseeded || !slices.Equal(lr.EntropySources, []string{EntropyHost, EntropyTime}) || !slices.Equal(lr.KernelsReseeded, []string{"k1"}) ||
		len(lr.KernelsNotReseeded) != 1 || lr.KernelsNotReseeded[0].Kernel != "k2" {
		t.Fatalf("last_resume %+v", lr)
	}
	if !bytes.Equal(o.hosts[0], host) {
		t.Fatal("the host's bytes did not reach the re-key")
	}

	// The host's POST after the guest noticed the restore by itself: its
	// bytes are mixed in then, and last_resume says so.
	o.steps = nil
	m2, _ := New(Options{Reseed: true, CRNG: o, SetClock: func(time.Time) error { return nil }})
	m = m2
	m2.Resume(context.Background(), Report{Source: SourceVMGenID})
	st = m2.Resume(context.Background(), Report{Source: SourceHost, Entropy: host})
	if st.Generation != 1 || len(o.steps) != 2 || !slices.Contains(st.LastResume.EntropySources, EntropyHost) {
		t.Fatalf("a late host report: generation %d, steps %v, sources %v", st.Generation, o.steps, st.LastResume.EntropySources)
	}
}

// TestReseedOff: with reseeding off nothing is re-keyed or reseeded, and
// last_resume says why.
func TestReseedOff(t *testing.T) {
	var m *Manager
	o := &orderRecorder{m: func() *Manager { return m }}
	m, _ = New(Options{Reseed: false, CRNG: o, KernelReseed: o, SetClock: func(time.Time) error { return nil }})
	st := m.Resume(context.Background(), Report{Source: SourceHost, Entropy: bytes.Repeat([]byte{1}, 32)})
	if len(o.steps) != 0 || st.LastResume.Reseeded || !strings.Contains(st.LastResume.ReseedError, "reseed-on-resume=false") {
		t.Fatalf("steps %v, last_resume %+v", o.steps, st.LastResume)
	}
}

// TestRealRekey: as root (the tests run as root, as the image's agent
// has CAP_SYS_ADMIN) the real ioctls succeed, with the clocks and this
// machine's CPU RNG among the sources; a cold boot does not re-key.
func TestRealRekey(t *testing.T) {
	c := NewCRNG()
	if c.Unable() != nil {
		t.Skipf("no CAP_SYS_ADMIN here: %v", c.Unable())
	}
	src, err := c.Rekey(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if src[0] != EntropyHost || !slices.Contains(src, EntropyTime) {
		t.Fatalf("sources %v", src)
	}
	dir := t.TempDir()
	saveState(dir, persisted{Generation: 3, BootID: "another boot"})
	m, err := New(Options{StateDir: dir, Reseed: true})
	if err != nil {
		t.Fatal(err)
	}
	if lr := m.State().LastResume; lr == nil || lr.Source != SourceBoot || lr.Reseeded || len(lr.EntropySources) != 0 {
		t.Fatalf("a cold boot's last_resume: %+v", lr)
	}
}

// TestMissingCapabilityReported: an agent without CAP_SYS_ADMIN is told
// why at start, and its resumes report reseeded false with the reason. The
// check runs in a child of this test that drops to nobody.
func TestMissingCapabilityReported(t *testing.T) {
	if os.Getenv("RAYITO_CRNG_CHILD") == "1" {
		m, _ := New(Options{Reseed: true, SetClock: func(time.Time) error { return nil }})
		st := m.Resume(context.Background(), Report{Source: SourceHost})
		os.Stdout.WriteString(st.LastResume.ReseedError + "|" + strings.Join(st.LastResume.EntropySources, ","))
		if st.LastResume.Reseeded {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	// The test binary's own directory is root's alone: nobody runs a copy.
	dir, err := os.MkdirTemp("", "rayito-crng-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := dir + "/resume.test"
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^TestMissingCapabilityReported$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RAYITO_CRNG_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v, %s", err, out)
	}
	if !strings.Contains(string(out), "lacks CAP_SYS_ADMIN") || !strings.Contains(string(out), EntropyTime) {
		t.Fatalf("child reported %q", out)
	}
}

func TestDecodeEntropy(t *testing.T) {
	raw := bytes.Repeat([]byte{0xfb, 0xff, 0x01}, 11) // 33 bytes, + and / in base64
	for _, s := range []string{base64.StdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw)} {
		if b, err := DecodeEntropy(s); err != nil || !bytes.Equal(b, raw) {
			t.Fatalf("%q: %v", s, err)
		}
	}
	for _, n := range []int{32, 512} {
		if _, err := DecodeEntropy(base64.StdEncoding.EncodeToString(make([]byte, n))); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("s"), 31))
	for _, s := range []string{secret, base64.StdEncoding.EncodeToString(make([]byte, 513)), "not base64!", ""} {
		_, err := DecodeEntropy(s)
		if err == nil || (s != "" && strings.Contains(err.Error(), s)) {
			t.Fatalf("%q: %v", s, err)
		}
	}
}

// TestSandboxIdentity: a report or an init naming another sandbox than
// the last renews the identity once; the same id, or none, changes
// nothing; the id survives an agent restart on the same state directory.
func TestSandboxIdentity(t *testing.T) {
	dir := t.TempDir()
	var renewed []string
	opts := Options{StateDir: dir, SetClock: func(time.Time) error { return nil }, OnNewSandbox: func(id string) { renewed = append(renewed, id) }}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "a", SandboxID: "sb-1"}); !st.LastResume.NewSandbox || st.SandboxID != "sb-1" {
		t.Fatalf("first sandbox id: %+v", st)
	}
	if st := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "b", SandboxID: "sb-1"}); st.LastResume.NewSandbox {
		t.Fatal("the same sandbox id renewed the identity")
	}
	if st := m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "c"}); st.LastResume.NewSandbox || st.SandboxID != "sb-1" {
		t.Fatal("a report without a sandbox id renewed the identity")
	}
	if _, isNew := m.Init(nil, "sb-2"); !isNew {
		t.Fatal("init with another sandbox id did not renew")
	}
	if !slices.Equal(renewed, []string{"sb-1", "sb-2"}) {
		t.Fatalf("renewed for %v", renewed)
	}
	m2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, isNew := m2.Init(nil, "sb-2"); isNew || m2.State().SandboxID != "sb-2" {
		t.Fatal("after a restart the same sandbox id renewed the identity")
	}
	if err := CheckSandboxID(strings.Repeat("x", 129)); err == nil {
		t.Fatal("a 129-byte sandbox id was accepted")
	}
}
