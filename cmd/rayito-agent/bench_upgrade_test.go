package main

import (
	"context"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// BenchmarkAgentUpgrade: an idle agent handed to another build and back,
// over and over: the time from the host's call to its answer (the new
// agent serving), against the baseline of the same binary started afresh
// until it serves (what a restart costs, losing everything). Run with
// -benchtime Nx.
func BenchmarkAgentUpgrade(b *testing.B) {
	binA := agentVariant(b, "bench-a", "")
	binB := agentVariant(b, "bench-b", "")
	b.Run("upgrade", func(b *testing.B) {
		a := startUpgradeAgent(b, binA)
		bins := []string{binB, binA}
		var exec float64
		b.ResetTimer()
		for i := range b.N {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			ans, err := a.host.Upgrade(ctx, client.UpgradeOptions{Path: bins[i%2]})
			cancel()
			if err != nil || ans.State != "upgraded" {
				b.Fatalf("upgrade %d: %v %+v", i, err, ans)
			}
			for _, s := range ans.Steps {
				if s.Step == "exec" {
					exec += s.Ms
				}
			}
		}
		b.ReportMetric(exec/float64(b.N), "exec-ms/op")
	})
	b.Run("restart", func(b *testing.B) {
		for range b.N {
			a := startUpgradeAgent(b, binA)
			b.StopTimer()
			a.stop()
			b.StartTimer()
		}
	})
}
