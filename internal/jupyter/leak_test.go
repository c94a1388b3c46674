package jupyter

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// resources is what a kernel leaves behind if something leaks: kernel
// processes that are this test binary's children (orphans are too, since
// the reaper makes it a subreaper), open descriptors, connection dirs.
type resources struct {
	procs []int
	fds   int
	dirs  []string
}

// beforeLeakCheck points the test's temporary files (connection dirs)
// at a directory of its own, since other packages' tests may start
// kernels at the same time, and returns what exists now. Only for tests
// that are not parallel: parallel ones wait until every serial test is
// done, so nothing else in this binary starts or stops kernels meanwhile.
func beforeLeakCheck(t *testing.T) resources {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir())
	return snapshotResources(t)
}

func snapshotResources(t testing.TB) resources {
	t.Helper()
	var r resources
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		st, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err1 != nil || err2 != nil || !strings.Contains(string(cmd), "rayito-kernel-") {
			continue
		}
		// stat: pid (comm) state ppid ...; comm may hold spaces.
		fields := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(fields) > 1 && fields[1] == self && fields[0] != "Z" {
			r.procs = append(r.procs, pid)
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	r.fds = len(fds)
	r.dirs, _ = filepath.Glob(filepath.Join(os.TempDir(), "rayito-kernel-*"))
	return r
}

// waitNoLeak waits until no kernel process, descriptor or connection dir
// is left beyond what before had.
func waitNoLeak(t testing.TB, before resources) {
	t.Helper()
	var now resources
	deadline := time.Now().Add(15 * time.Second)
	for {
		now = snapshotResources(t)
		extraProcs := slices.DeleteFunc(slices.Clone(now.procs), func(p int) bool { return slices.Contains(before.procs, p) })
		extraDirs := slices.DeleteFunc(slices.Clone(now.dirs), func(d string) bool { return slices.Contains(before.dirs, d) })
		if len(extraProcs) == 0 && len(extraDirs) == 0 && now.fds <= before.fds {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaked: kernel processes %v, connection dirs %v, descriptors %d (was %d)", extraProcs, extraDirs, now.fds, before.fds)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatedSpec writes a kernelspec "gated" whose kernel is the real one,
// except that once dir/fail exists a start hangs until dir/release
// exists and then fails. Every start writes its pid to dir/pid first.
func gatedSpec(t *testing.T) (dataDir, dir string) {
	t.Helper()
	dataDir, dir = t.TempDir(), t.TempDir()
	std, err := findSpec(StandardDataDirs(), DefaultKernel)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "kernel.sh")
	body := "#!/bin/sh\n" +
		"echo $$ > \"$GATE/pid.tmp\" && mv \"$GATE/pid.tmp\" \"$GATE/pid\"\n" +
		"if [ -e \"$GATE/fail\" ]; then\n" +
		"  while [ ! -e \"$GATE/release\" ]; do sleep 0.05; done\n" +
		"  echo 'gated kernel refuses to start' >&2\n" +
		"  exit 3\n" +
		"fi\n" +
		"exec \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"/bin/sh", script}, std.Argv...)
	spec, _ := json.Marshal(map[string]any{
		"argv": argv, "display_name": "gated", "language": "python", "env": map[string]string{"GATE": dir},
	})
	writeSpec(t, dataDir, "gated", string(spec))
	return dataDir, dir
}

// touch creates an empty file.
func touch(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitPid waits for the gated kernel's start to write its pid, and
// removes the file for the next start.
func waitPid(t testing.TB, dir string) int {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil {
			os.Remove(filepath.Join(dir, "pid"))
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the kernel never started")
	return 0
}

// startAsync starts a kernel on m in the background and returns its id
// (taken from List while it starts) and the Start's outcome.
func startAsync(t testing.TB, m *Manager, name string) (string, <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	before := map[string]bool{}
	for _, info := range m.List() {
		before[info.Kernel] = true
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_, err := m.Start(ctx, StartOptions{Name: name})
		done <- err
	}()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		for _, info := range m.List() {
			if !before[info.Kernel] {
				return info.Kernel, done
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the kernel never appeared in List")
	return "", nil
}

// waitDone waits for an asynchronous Start or Restart.
func waitDone(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitFor):
		t.Fatal("start or restart never returned")
		return nil
	}
}
