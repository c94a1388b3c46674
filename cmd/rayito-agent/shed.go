package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// shedAfter is when, after it starts serving, the agent lets go of the
// pages of its binary the start used: the listeners' first turns and the
// resume detectors' first checks are done by then (unmapped at once, 1.4
// MiB of them came back within a second).
const shedAfter = 2 * time.Second

// shedStartupPages unmaps the agent's own code and read-only data from the
// agent's memory, once, after it started serving (shedAfter); what the
// agent runs from then on is mapped again at first use, from the page
// cache.
//
// Starting touches most of the binary: every package's initialisation,
// the flags, the assembly of the surfaces, and the kernel maps 64 KiB
// around each page touched. So an idle agent had 10.7 of its 12.2 MiB
// resident in its binary's pages, most of them never used again
// (docs/benchmarks.md, "The binary's pages"). Mapped pages stay in every
// snapshot of the VM: the pause drops the clean page cache
// (resume/quiesce.go), but not pages a process maps. Unmapped, the pages
// only the start used are page cache like any other, dropped at the pause.
//
// Only private mappings of the binary that nothing writes are unmapped:
// their pages are the file's, read again as they were. The binary's data
// (written, copy-on-write) stays untouched.
func shedStartupPages() (int64, error) {
	var exe unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var shed int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lo, hi, ok := readOnlyMappingOf(sc.Text(), exe)
		if !ok {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_DONTNEED); errno != 0 {
			return shed, fmt.Errorf("madvise %x-%x: %w", lo, hi, errno)
		}
		shed += int64(hi - lo)
	}
	return shed, sc.Err()
}

// readOnlyMappingOf parses a line of /proc/self/maps ("lo-hi perms offset
// major:minor inode path") and says whether it maps the file exe private
// and without write permission, and where.
func readOnlyMappingOf(line string, exe unix.Stat_t) (lo, hi uintptr, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 || len(f[1]) != 4 || f[1][1] == 'w' || f[1][3] != 'p' {
		return 0, 0, false
	}
	if inode, err := strconv.ParseUint(f[4], 10, 64); err != nil || inode != exe.Ino {
		return 0, 0, false
	}
	major, minor, found := strings.Cut(f[3], ":")
	maj, err1 := strconv.ParseUint(major, 16, 32)
	min, err2 := strconv.ParseUint(minor, 16, 32)
	if !found || err1 != nil || err2 != nil || unix.Mkdev(uint32(maj), uint32(min)) != exe.Dev {
		return 0, 0, false
	}
	l, h, found := strings.Cut(f[0], "-")
	a, err1 := strconv.ParseUint(l, 16, 64)
	b, err2 := strconv.ParseUint(h, 16, 64)
	if !found || err1 != nil || err2 != nil || b <= a {
		return 0, 0, false
	}
	return uintptr(a), uintptr(b), true
}
