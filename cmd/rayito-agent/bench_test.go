package main

import (
	"os"
	"testing"
	"time"
)

// BenchmarkIdleFootprint starts the static binary, lets it settle (past
// the moment it lets go of the pages only its start used, shedAfter) and
// reports its resident memory and its size. It is a benchmark, not a
// test: the numbers go to docs/benchmarks.md.
func BenchmarkIdleFootprint(b *testing.B) {
	st, err := os.Stat(agentBinary(b))
	if err != nil {
		b.Fatal(err)
	}
	var rss []float64
	for i := 0; i < b.N; i++ {
		a := startAgentProc(b)
		a.health(b)
		time.Sleep(shedAfter + 2*time.Second)
		kib, _ := a.memory(b)
		rss = append(rss, mib(kib))
		a.stop()
	}
	b.ReportMetric(median(rss), "idle_RSS_MiB")
	b.ReportMetric(float64(st.Size())/(1<<20), "binary_MiB")
}
