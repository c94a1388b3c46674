package stream_test

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestInstanceIDs: each registry (each run of the agent) has its own
// instance id, and no id one hands out is one another could hand out, or
// that a JavaScript number cannot hold exactly. The prefix that keeps two
// runs' ids apart is 21 random bits: two of 50 runs draw the same one
// about once in 1,700 tests, which the test allows once (two such pairs
// would take about one in six million).
func TestInstanceIDs(t *testing.T) {
	const runs = 50
	instances := map[string]bool{}
	owner := map[uint64]int{}
	prefix := make([]uint64, runs)
	regs := make([]*stream.Registry, runs)
	shared := 0 // pairs of runs that drew the same prefix
	for i := range regs {
		r := stream.NewRegistry(0)
		defer r.Close()
		regs[i] = r
		if len(r.Instance()) != 32 || instances[r.Instance()] {
			t.Fatalf("run %d: instance %q is not a fresh 128-bit id", i, r.Instance())
		}
		instances[r.Instance()] = true
		for k := range 3 {
			s := r.Create(stream.Config{Kind: stream.KindProcess})
			if s.ID == 0 || s.ID > stream.MaxID || s.ID > 1<<53-1 {
				t.Fatalf("run %d: id %d is 0 or not below 2^53", i, s.ID)
			}
			if k == 0 {
				prefix[i] = s.ID >> 32
				for j := range i {
					if prefix[j] == prefix[i] {
						shared++
					}
				}
			}
			if s.ID>>32 != prefix[i] {
				t.Fatalf("run %d: id %#x is not under its prefix %#x", i, s.ID, prefix[i])
			}
			if j, ok := owner[s.ID]; ok && prefix[j] != prefix[i] {
				t.Fatalf("id %d handed out by run %d and run %d", s.ID, j, i)
			}
			owner[s.ID] = i
		}
	}
	if shared > 1 {
		t.Fatalf("%d pairs of 50 runs drew the same id prefix", shared)
	}
	for id, i := range owner {
		for j, r := range regs {
			if got := r.Owns(id); got != (prefix[i] == prefix[j]) {
				t.Fatalf("run %d Owns(%d) = %v; the id is run %d's", j, id, got, i)
			}
		}
	}
	if regs[0].Owns(1) || regs[0].Owns(999999) {
		t.Fatal("small ids, as an agent that restarted used to hand out, are owned")
	}
}

// TestInstancePrefixUsedUp: after 2^32 ids the registry goes on under a
// new prefix it owns, still below 2^53, never repeating an id.
func TestInstancePrefixUsedUp(t *testing.T) {
	r := stream.NewRegistry(0)
	defer r.Close()
	first := r.Create(stream.Config{})
	stream.UseUpPrefix(r)
	last := r.Create(stream.Config{})
	next := r.Create(stream.Config{})
	if last.ID>>32 != first.ID>>32 || last.ID&(1<<32-1) != 1<<32-1 {
		t.Fatalf("last id of the prefix is %#x, first was %#x", last.ID, first.ID)
	}
	if next.ID>>32 == first.ID>>32 || next.ID > stream.MaxID || next.ID&(1<<32-1) != 1 {
		t.Fatalf("id after the prefix's last is %#x", next.ID)
	}
	for _, s := range []*stream.Stream{first, last, next} {
		if !r.Owns(s.ID) || r.Get(s.ID) != s {
			t.Fatalf("stream %#x not owned or not found", s.ID)
		}
	}
}
