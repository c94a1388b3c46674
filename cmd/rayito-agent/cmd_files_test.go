package main

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCpCommand copies a file and a directory into the sandbox and back
// out, through stdin and stdout too, and lists, stats and removes.
func TestCpCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	run := func(fn func([]string, *bytes.Buffer, *bytes.Buffer) int, args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := fn(append([]string{"--url", url}, args...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String(), errb.String()
	}
	cp := func(args []string, out, errb *bytes.Buffer) int {
		return runCp(args, strings.NewReader("from stdin"), out, errb, false)
	}
	ls := func(args []string, out, errb *bytes.Buffer) int { return runLs(args, out, errb) }

	local := t.TempDir()
	remote := t.TempDir() // "in the sandbox": the agent runs on this machine
	big := make([]byte, 5<<20)
	rand.New(rand.NewSource(9)).Read(big)
	os.WriteFile(filepath.Join(local, "big.bin"), big, 0o600)
	os.MkdirAll(filepath.Join(local, "tree/sub"), 0o755)
	os.WriteFile(filepath.Join(local, "tree/a.txt"), []byte("A"), 0o644)
	os.WriteFile(filepath.Join(local, "tree/sub/b.txt"), []byte("B"), 0o755)

	run(cp, filepath.Join(local, "big.bin"), ":"+remote+"/")
	if got, _ := os.ReadFile(filepath.Join(remote, "big.bin")); !bytes.Equal(got, big) {
		t.Fatal("file upload differs")
	}
	if st, _ := os.Stat(filepath.Join(remote, "big.bin")); st.Mode().Perm() != 0o600 {
		t.Fatalf("uploaded mode %v", st.Mode())
	}
	run(cp, filepath.Join(local, "tree"), ":"+filepath.Join(remote, "copy"))
	for name, want := range map[string]string{"copy/a.txt": "A", "copy/sub/b.txt": "B"} {
		if got, _ := os.ReadFile(filepath.Join(remote, name)); string(got) != want {
			t.Fatalf("directory upload: %s is %q", name, got)
		}
	}
	run(cp, "-", ":"+filepath.Join(remote, "in.txt"))
	if got, _ := os.ReadFile(filepath.Join(remote, "in.txt")); string(got) != "from stdin" {
		t.Fatalf("stdin upload: %q", got)
	}

	back := t.TempDir()
	run(cp, ":"+filepath.Join(remote, "big.bin"), filepath.Join(back, "big.bin"))
	if got, _ := os.ReadFile(filepath.Join(back, "big.bin")); !bytes.Equal(got, big) {
		t.Fatal("file download differs")
	}
	run(cp, ":"+filepath.Join(remote, "copy"), back)
	for name, want := range map[string]string{"copy/a.txt": "A", "copy/sub/b.txt": "B"} {
		if got, _ := os.ReadFile(filepath.Join(back, name)); string(got) != want {
			t.Fatalf("directory download: %s is %q", name, got)
		}
	}
	if st, _ := os.Stat(filepath.Join(back, "copy/sub/b.txt")); st.Mode().Perm() != 0o755 {
		t.Fatalf("downloaded mode %v", st.Mode())
	}
	if out, _ := run(cp, ":"+filepath.Join(remote, "in.txt"), "-"); out != "from stdin" {
		t.Fatalf("download to stdout: %q", out)
	}

	if out, _ := run(ls, filepath.Join(remote, "copy")); out != "a.txt\nsub\n" {
		t.Fatalf("ls: %q", out)
	}
	if out, _ := run(ls, "--depth", "2", "-l", filepath.Join(remote, "copy")); !strings.Contains(out, "-rwxr-xr-x") || !strings.Contains(out, "sub/b.txt") {
		t.Fatalf("ls -l: %q", out)
	}
	// Columns line up as ls -l's: owner and group padded on the right,
	// sizes on the left; every line as long as the others up to the name.
	out, _ := run(ls, "-l", ":"+filepath.Join(remote, "copy"))
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || strings.Index(lines[0], " a.txt") != strings.Index(lines[1], " sub") || !strings.HasPrefix(lines[1], "d") {
		t.Fatalf("ls -l of :%s does not line up:\n%s", filepath.Join(remote, "copy"), out)
	}
	out, _ = run(func(a []string, o, e *bytes.Buffer) int { return runStat(a, o, e) }, ":"+filepath.Join(remote, "in.txt"))
	var st map[string]any
	if json.Unmarshal([]byte(out), &st) != nil || st["type"] != "file" || st["size"] != float64(10) || st["mode"] != "0644" {
		t.Fatalf("stat: %s", out)
	}
	run(func(a []string, o, e *bytes.Buffer) int { return runMkdir(a, o, e) }, ":"+filepath.Join(remote, "m/n"))
	if st, err := os.Stat(filepath.Join(remote, "m/n")); err != nil || !st.IsDir() {
		t.Fatalf("mkdir :PATH: %v", err)
	}
	run(func(a []string, o, e *bytes.Buffer) int { return runRm(a, o, e) }, "-r", ":"+filepath.Join(remote, "m"), filepath.Join(remote, "copy"))
	if entries, _ := os.ReadDir(remote); len(entries) != 2 {
		t.Fatalf("after rm: %v", entries)
	}

	var errb bytes.Buffer
	if code := runCp([]string{"--url", url, "a", "b"}, nil, &bytes.Buffer{}, &errb, false); code != 2 {
		t.Fatalf("cp without a remote path: exit %d", code)
	}
	errb.Reset()
	if code := runCp([]string{"--url", url, ":/no/such/file", back}, nil, &bytes.Buffer{}, &errb, false); code != 1 || !strings.Contains(errb.String(), "not_found") {
		t.Fatalf("cp of a missing file: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := runRm([]string{"--url", url, filepath.Join(remote, "nope")}, &bytes.Buffer{}, &errb); code != 1 {
		t.Fatalf("rm of a missing file: exit %d", code)
	}
}

// TestProgressBar: a bar on a terminal, none for small transfers or
// elsewhere.
func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	if p := newProgress(&out, false, "x", 100<<20); p != nil {
		t.Fatal("a bar without a terminal")
	}
	if p := newProgress(&out, true, "x", 1<<20); p != nil {
		t.Fatal("a bar for 1 MiB")
	}
	p := newProgress(&out, true, "data.bin", 10<<20)
	p.Write(make([]byte, 5<<20))
	p.finish()
	if s := out.String(); !strings.Contains(s, "data.bin [===============               ] 5.0 MiB / 10.0 MiB  50%") || !strings.HasSuffix(s, "\n") {
		t.Fatalf("bar %q", s)
	}
}
