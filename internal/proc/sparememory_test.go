package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestStallGauge: the gauge says stalled when work's memory is at its
// limit and "some avg10" of its memory.pressure is spareStallPercent or
// more, or its trigger fired within stallFresh, each read anew from its kept descriptors; a stall that outlives
// its cause (the memory freed by an OOM kill, the 10 s average still
// high) is not one; a file it cannot read says not stalled.
func TestStallGauge(t *testing.T) {
	dir := t.TempDir()
	set := func(name, text string) {
		t.Helper()
		// Rewritten in place, as the kernel's files are: the kept
		// descriptors must see each new text.
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(text)
		f.Close()
	}
	l := CgroupLimits{MemoryMax: 512 << 20, MemoryHigh: 512 << 20}
	limit := l.MemoryMax - SpareMemory(l)
	set("memory.current", "0\n")
	set("memory.pressure", "")
	g := openStallGauge(dir, l)
	if g == nil {
		t.Fatal("no gauge for a directory with memory.current and memory.pressure")
	}
	defer g.close()
	for _, c := range []struct {
		current int64
		some    string
		want    bool
	}{
		{0, "0.00", false},
		{limit, "19.99", false},
		{limit, "20.00", true},
		{limit - 1<<20, "87.50", true},
		{limit / 2, "87.50", false}, // the runaway just killed
		{limit, "5.10", false},
		{limit, "garbage", false},
	} {
		set("memory.current", strconv.FormatInt(c.current, 10)+"\n")
		set("memory.pressure", "some avg10="+c.some+" avg60=0.00 avg300=0.00 total=123\nfull avg10=90.00 avg60=0.00 avg300=0.00 total=5\n")
		if got := g.stalled(); got != c.want {
			t.Errorf("memory.current %d MiB of work's %d, some avg10=%s: stalled %v, want %v", c.current>>20, limit>>20, c.some, got, c.want)
		}
	}
	// The trigger fired within stallFresh: stalled now, though the 10 s
	// average has not caught up; at the limit only.
	set("memory.pressure", "some avg10=3.00 avg60=0.00 avg300=0.00 total=123\n")
	g.fired.Store(time.Now().UnixNano())
	if !g.stalled() {
		t.Error("the trigger fired just now, at the limit: not stalled")
	}
	set("memory.current", strconv.FormatInt(limit/2, 10)+"\n")
	if g.stalled() {
		t.Error("the trigger fired just now, far below the limit: stalled")
	}
	set("memory.current", strconv.FormatInt(limit, 10)+"\n")
	g.fired.Store(time.Now().Add(-stallFresh - time.Second).UnixNano())
	if g.stalled() {
		t.Errorf("the trigger fired %v ago: stalled", stallFresh+time.Second)
	}
	if openStallGauge(t.TempDir(), l) != nil {
		t.Error("a gauge for a directory without memory.pressure")
	}
	var none *stallGauge
	if none.stalled() {
		t.Error("no gauge says stalled")
	}
}
