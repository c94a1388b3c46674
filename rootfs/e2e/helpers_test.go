package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checker behind "every line exactly once" must catch each way a
// stream can go wrong, and count what was lost or duplicated.
func TestSequenceFindsProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  string // substring of the first problem; "" for none
		tally tally  // what it counted
	}{
		{"complete", "tick 0 7\ntick 1 7\r\ntick 2 7\ndone 3 7\n", "",
			tally{items: 3, received: 37}},
		{"duplicate", "tick 0 7\ntick 1 7\ntick 1 7\ntick 2 7\ndone 3 7\n", "duplicate",
			tally{items: 3, dup: 1, received: 45, dupBytes: 9}},
		{"missing", "tick 0 7\ntick 9 7\ndone 10 7\n", "missing",
			tally{items: 2, lost: 8, received: 28, lostBytes: 72}},
		{"missing across a digit", "tick 8 7\ntick 11 7\ndone 12 7\n", "missing",
			tally{items: 2, lost: 10, received: 29, lostBytes: 8*9 + 9 + 10}},
		{"restarted", "tick 0 7\ntick 1 8\ndone 2 8\n", "restarted",
			tally{items: 2, received: 27}},
		{"short", "tick 0 7\ntick 1 7\ndone 3 7\n", "producer made 3",
			tally{items: 2, received: 27}},
		{"no end", "tick 0 7\n", "no done line",
			tally{items: 1, received: 9}},
		{"garbage", "tick 0 7\nhello\ndone 1 7\n", "unexpected line",
			tally{items: 1, received: 24, stray: 6}},
		{"unterminated", "tick 0 7\ndone 1 7\ntick", "unterminated",
			tally{items: 1, received: 22}},
		{"torn", "tick 0 7\ntick 1 7\ndone 2 7\n" + "x", "unterminated",
			tally{items: 2, received: 28}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSequence("tick", 7)
			// Arbitrary chunking, as terminal and cell output arrive.
			for i := 0; i < len(tc.input); i += 5 {
				s.feed(tc.input[i:min(i+5, len(tc.input))])
			}
			_, problems := s.result()
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("problems %q, want none", problems)
			case tc.want != "" && (len(problems) == 0 || !strings.Contains(problems[0], tc.want)):
				t.Errorf("problems %q, want one about %q", problems, tc.want)
			}
			if got := s.counts(); got != tc.tally {
				t.Errorf("counted %+v, want %+v", got, tc.tally)
			}
		})
	}
	// A producer that wrote more bytes than its lines account for (a line
	// repeated inside another one's bytes is no item) is caught by the
	// byte count alone.
	s := newSequence("tick", 7)
	s.feed("tick 0 7\ntick 1  7\ndone 2 7\n")
	if _, problems := s.result(); len(problems) != 1 || !strings.Contains(problems[0], "bytes received") {
		t.Errorf("problems %q, want one about the bytes", problems)
	}
}

// One generation too many shows where it happened, however the cycles
// after it went.
func TestSoakReportFindsExtraGeneration(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The cycles (from 0) whose generation after, and before, are one
		// more than they should be from then on.
		after, before uint64
		want          string
	}{
		{"a restore bumped twice", 9, 10, "restore 10 took the generation from 9 to 11 (the one before ended at 9)"},
		{"a bump between restores", 10, 10, "restore 11 took the generation from 11 to 12 (the one before ended at 10)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &soakReport{cycles: 20}
			for i := uint64(0); i < 20; i++ {
				res := cycleResult{before: i, generation: i + 1}
				if i >= tc.after {
					res.generation++
				}
				if i >= tc.before {
					res.before++
				}
				rep.results = append(rep.results, res)
			}
			rep.final.ResumeGeneration = 21
			fs := rep.failures()
			if len(fs) < 2 || fs[0] != tc.want || !strings.Contains(fs[1], "final resume generation 21") {
				t.Errorf("failures %q, want %q first, then the final generation", fs, tc.want)
			}
		})
	}
}

// Event seqs must go 1, 2, 3...: holes and repeats are counted.
func TestSequenceEventSeqs(t *testing.T) {
	s := newSequence("watch", 0)
	for _, seq := range []uint64{1, 2, 2, 5, 6, 3} {
		s.seqEvent(seq)
	}
	want := tally{events: 4, lostEvents: 2, dupEvents: 2}
	if got := s.counts(); got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
	_, problems := s.result()
	if len(problems) < 3 || !strings.Contains(problems[0], "duplicate") || !strings.Contains(problems[1], "2 missing") {
		t.Errorf("problems %q", problems)
	}
}

// hostRoute holds dials while the VM is down and leads them to the
// address set last.
func TestHostRoute(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	r := newHostRoute()
	defer r.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := r.dial(ctx, "tcp", "ignored:1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial while down: %v, want the context's deadline", err)
	}

	got := make(chan error, 1)
	go func() {
		resp, err := r.HTTPClient().Get(routeURL + "/health")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("request went through while the route was down: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	r.Set(strings.TrimPrefix(srv.URL, "http://"))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	r.Down()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r.Set(addr) // nothing listens there now
	if _, err := r.HTTPClient().Get(routeURL + "/health"); err == nil {
		t.Error("request reached the old address after Down and Set")
	}
}

// The soak's verdict must catch each thing it promises to check.
func TestSoakReportFindsProblems(t *testing.T) {
	good := func() *soakReport {
		rep := &soakReport{cycles: 20, streams: []string{"exec: fine", "watch: fine"}, tallies: []tally{{items: 9}, {items: 9, events: 18}}}
		for i := uint64(1); i <= 20; i++ {
			rep.results = append(rep.results, cycleResult{before: i - 1, generation: i, reattached: time.Duration(i) * time.Second})
			rep.reconnects = append(rep.reconnects, i)
		}
		rep.reconnects = append(rep.reconnects, 20) // a second reconnect in a generation is no error
		rep.final.ResumeGeneration = 20
		for _, c := range []uint64{0, 10, 20} {
			rep.samples = append(rep.samples, footprint{cycle: c, rss: 20 << 20, fds: 30, threads: 8, goroutines: 60, live: 8 << 20, retained: 3 << 20, ended: soakKeepEnded})
		}
		rep.samples[0].rss = 10 << 20 // growth before the first cycle is warm-up
		// Retention may grow, and RSS with it.
		rep.samples[2].retained += 4 << 20
		rep.samples[2].live += 4 << 20
		rep.samples[2].rss += rssSlack + 8<<20
		return rep
	}
	if fs := good().failures(); len(fs) > 0 {
		t.Fatalf("a good soak failed: %q", fs)
	}
	if p50, p99, lo, hi := good().percentiles(func(r cycleResult) time.Duration { return r.reattached }); p50 != 10*time.Second || p99 != 20*time.Second || lo != time.Second || hi != 20*time.Second {
		t.Errorf("percentiles %s %s %s %s, want 10s 20s 1s 20s", p50, p99, lo, hi)
	}
	for _, tc := range []struct {
		name  string
		spoil func(*soakReport)
		want  string
	}{
		{"a cycle missing", func(r *soakReport) {
			r.results, r.reconnects, r.final.ResumeGeneration = r.results[:19], r.reconnects[:19], 19
		}, "19 of 20 cycles"},
		{"a line lost", func(r *soakReport) { r.tallies[0].lost = 1 }, "lost or duplicated: exec"},
		{"bytes duplicated", func(r *soakReport) { r.tallies[0].dupBytes = 3 }, "lost or duplicated: exec"},
		{"stray bytes", func(r *soakReport) { r.tallies[0].stray = 3 }, "lost or duplicated: exec"},
		{"an event lost", func(r *soakReport) { r.tallies[1].lostEvents = 1 }, "lost or duplicated: watch"},
		{"an event twice", func(r *soakReport) { r.tallies[1].dupEvents = 1 }, "lost or duplicated: watch"},
		{"generation off", func(r *soakReport) { r.final.ResumeGeneration = 21 }, "final resume generation 21"},
		{"a reconnect missing", func(r *soakReport) { r.reconnects = slices.Delete(r.reconnects, 4, 5) }, "reconnected at generations"},
		{"a reconnect at 0", func(r *soakReport) { r.reconnects = append([]uint64{0}, r.reconnects...) }, "reconnected at generations"},
		{"kernel lost once", func(r *soakReport) { r.results[3].kernelStateLost = true }, "kernel_state_lost after 1"},
		{"kernel lost at the end", func(r *soakReport) { r.final.KernelStateLost = true }, "kernel_state_lost"},
		{"a reading failed", func(r *soakReport) { r.sampleErrs = []string{"after cycle 10: boom"} }, "boom"},
		{"descriptors grow", func(r *soakReport) { r.samples[2].fds += fdSlack + 1 }, "descriptors"},
		{"goroutines grow", func(r *soakReport) { r.samples[2].goroutines += goroutineSlack + 1 }, "goroutines"},
		{"RSS grows", func(r *soakReport) { r.samples[2].rss++ }, "RSS"},
		{"live heap grows", func(r *soakReport) { r.samples[2].live += liveSlack + 1 }, "live heap less retention"},
		{"retention shrinks, live heap not", func(r *soakReport) {
			r.samples[2].retained -= 4 << 20
			r.samples[2].rss -= 8 << 20
		}, "live heap less retention"},
		{"output dropped", func(r *soakReport) { r.samples[2].lost = 7 }, "discarded 7 bytes or events"},
		{"threads grow", func(r *soakReport) { r.samples[2].threads += threadSlack + 1 }, "threads"},
		{"more ended streams kept than --keep-ended", func(r *soakReport) { r.samples[2].ended++ }, "31 ended streams after cycle 20"},
		{"more ended streams kept at the first reading", func(r *soakReport) { r.samples[0].ended += 5 }, "35 ended streams after cycle 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := good()
			tc.spoil(rep)
			fs := rep.failures()
			if len(fs) != 1 || !strings.Contains(fs[0], tc.want) {
				t.Errorf("failures %q, want one about %q", fs, tc.want)
			}
			if md := rep.markdown(true); !strings.Contains(md, tc.want) {
				t.Errorf("the report does not say %q:\n%s", tc.want, md)
			}
		})
	}
}
