package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/client"
)

// binaryPages sums the size and the resident part, in KiB, of the
// read-only mappings of the executable of process pid.
func binaryPages(t *testing.T, pid int) (size, rss int) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mine := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's first line
			mine = len(fields) >= 6 && fields[5] == exe && !strings.Contains(fields[1], "w")
			continue
		}
		if !mine || len(fields) < 2 {
			continue
		}
		n, _ := strconv.Atoi(fields[1])
		switch fields[0] {
		case "Size:":
			size += n
		case "Rss:":
			rss += n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if size == 0 {
		t.Fatalf("no read-only mapping of %s in process %d", exe, pid)
	}
	return size, rss
}

// TestIdleAgentLetsGoOfStartupPages: a few seconds after it started, an
// idle agent (the real binary) keeps at most half of its code and
// read-only data mapped (it kept 86% before it let go of what only the
// start used), and what it runs later is mapped again: a command still
// runs and answers.
func TestIdleAgentLetsGoOfStartupPages(t *testing.T) {
	a := startAgentProc(t)
	a.health(t)
	deadline := time.Now().Add(shedAfter + 20*time.Second)
	size, rss := binaryPages(t, a.pid)
	for rss*2 > size {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the binary's %d KiB of code and read-only data still resident %v after the start", rss, size, shedAfter+20*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
		size, rss = binaryPages(t, a.pid)
	}
	t.Logf("binary pages resident when idle: %d of %d KiB", rss, size)
	c := a.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"echo", "still here"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "still here\n" {
		t.Fatalf("output after the agent let go of its pages: %q, %v", out, err)
	}
	if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
		t.Fatalf("exit after the agent let go of its pages: %v, %v", st, err)
	}
}

// shedProbe lies in the binary's data (initialised, so read from the
// file): the test changes it before letting go of the pages, and a
// data page read again from the file would have the old values back.
var shedProbe = [4]int{1, 2, 3, 4}

// TestShedStartupPagesInProcess: this test's own process lets go of its
// binary's read-only pages and runs on (its code is mapped again as it
// runs); its binary's written data keeps what was written.
func TestShedStartupPagesInProcess(t *testing.T) {
	shedProbe[2] = 42
	_, before := binaryPages(t, os.Getpid())
	n, err := shedStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no mapping of the binary was let go of")
	}
	_, after := binaryPages(t, os.Getpid())
	if after >= before {
		t.Fatalf("resident binary pages %d KiB after, %d before", after, before)
	}
	if shedProbe != [4]int{1, 2, 42, 4} {
		t.Fatalf("the binary's data is %v after, want [1 2 42 4]", shedProbe)
	}
}

// TestReadOnlyMappingOf: which lines of /proc/self/maps are let go of.
func TestReadOnlyMappingOf(t *testing.T) {
	exe := unix.Stat_t{Ino: 9978846, Dev: unix.Mkdev(0xfe, 0)}
	for _, c := range []struct {
		line   string
		lo, hi uintptr
		ok     bool
	}{
		{"00400000-009b7000 r-xp 00000000 fe:00 9978846 /usr/bin/rayito-agent", 0x400000, 0x9b7000, true},
		{"009b7000-00fec000 r--p 005b7000 fe:00 9978846 /usr/bin/rayito-agent", 0x9b7000, 0xfec000, true},
		{"00fec000-01068000 rw-p 00bec000 fe:00 9978846 /usr/bin/rayito-agent", 0, 0, false}, // written data
		{"00400000-009b7000 r-xs 00000000 fe:00 9978846 /usr/bin/rayito-agent", 0, 0, false}, // shared
		{"00400000-009b7000 r-xp 00000000 fe:00 1234 /usr/lib/other.so", 0, 0, false},        // another file
		{"00400000-009b7000 r-xp 00000000 fe:01 9978846 /mnt/other", 0, 0, false},            // same inode, other device
		{"382cbc800000-382cbcc00000 rw-p 00000000 00:00 0", 0, 0, false},                     // anonymous
		{"009b7000-00400000 r--p 005b7000 fe:00 9978846 /usr/bin/rayito-agent", 0, 0, false}, // malformed
		{"garbage", 0, 0, false},
	} {
		lo, hi, ok := readOnlyMappingOf(c.line, exe)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("%q: %x-%x %v, want %x-%x %v", c.line, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}
