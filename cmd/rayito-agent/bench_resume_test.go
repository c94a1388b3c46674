package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// BenchmarkResumeReseed: the answer to POST /v1/resume of an agent with
// four Python kernels, with the clone-safety steps (the CRNG re-key with
// the host's entropy, the kernels' reseed) and, as the baseline in the
// same run, of a second agent with --reseed-on-resume=false and four
// kernels too. The two take turns, so the machine's load weighs on both.
//
//	go test -run '^$' -bench ResumeReseed -benchtime 200x ./cmd/rayito-agent/
func BenchmarkResumeReseed(b *testing.B) {
	with := startAgentProc(b)
	without := startAgentProc(b, "--reseed-on-resume=false")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, a := range []*agentProc{with, without} {
		c := a.dial(b)
		defer c.Close()
		for range 4 {
			k, err := c.StartKernel(ctx, client.KernelOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := k.Execute(ctx, "import random", client.ExecuteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	resume := func(a *agentProc, i int, entropy []byte) time.Duration {
		started := time.Now()
		h, err := client.Host{URL: a.url, Token: benchToken}.Resume(ctx, client.ResumeOptions{ResumeID: fmt.Sprint("bench-", i), Entropy: entropy})
		took := time.Since(started)
		if err != nil {
			b.Fatal(err)
		}
		if a == with && (!h.LastResume.Reseeded || len(h.LastResume.KernelsReseeded) != 4) {
			b.Fatalf("not reseeded: %+v", h.LastResume)
		}
		return took
	}
	var withLat, withoutLat []time.Duration
	entropy := make([]byte, 32)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rand.Read(entropy)
		// Resumes of one agent more than 5 s apart are never deduplicated
		// here: every one has its own resume_id and comes from the host.
		if i%2 == 0 {
			withLat = append(withLat, resume(with, i, entropy))
			withoutLat = append(withoutLat, resume(without, i, nil))
		} else {
			withoutLat = append(withoutLat, resume(without, i, nil))
			withLat = append(withLat, resume(with, i, entropy))
		}
	}
	b.StopTimer()
	w, wo := quantile(withLat, 0.5), quantile(withoutLat, 0.5)
	b.ReportMetric(micros(w)/1e3, "reseed-p50-ms")
	b.ReportMetric(micros(quantile(withLat, 0.99))/1e3, "reseed-p99-ms")
	b.ReportMetric(micros(wo)/1e3, "baseline-p50-ms")
	b.ReportMetric(micros(quantile(withoutLat, 0.99))/1e3, "baseline-p99-ms")
	b.ReportMetric(micros(w-wo)/1e3, "added-p50-ms")
}
