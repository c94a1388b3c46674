package stream_test

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestRenew: a new sandbox's registry has a new instance, no ended stream
// of the template, and running streams without the output they had
// retained (an attach from 0 gets a gap, then what comes after); running
// streams keep their ids, and new ids come under a new prefix.
func TestRenew(t *testing.T) {
	r := newRegistry(t, stream.Limits{})
	ended := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 0)}})
	ended.Log("stdout").Write([]byte("template secret\n"))
	ended.Finish(exitEnd(0))
	running := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Block, 0)}})
	running.Log("stdout").Write([]byte("printed while the template was built\n"))
	events := r.Create(stream.Config{Channels: []stream.ChannelSpec{eventChan("events", stream.Drop, 0)}})
	events.Log("events").Append(func(seq uint64) []byte { return seqEvent(seq, 16) })

	old, cur := r.Renew()
	if old == cur || r.Instance() != cur {
		t.Fatalf("instance %s -> %s, Instance() %s", old, cur, r.Instance())
	}
	if r.Get(ended.ID) != nil {
		t.Fatal("the template's ended stream is still there")
	}
	if r.Get(running.ID) != running || !r.Owns(running.ID) {
		t.Fatal("a running stream was dropped")
	}
	running.Log("stdout").Write([]byte("after\n"))
	a, _ := running.Attach(nil, 0)
	defer a.Close()
	if it := nextWithin(t, a, 1<<10); it.Kind != stream.ItemGap || it.To != 37 {
		t.Fatalf("attach from 0 after Renew: %s, want a gap to 37", describe(it))
	}
	if it := nextWithin(t, a, 1<<10); it.Kind != stream.ItemData || string(it.Data) != "after\n" {
		t.Fatalf("then %s", describe(it))
	}
	ea, _ := events.Attach(nil, 0)
	defer ea.Close()
	if it := nextWithin(t, ea, 1<<10); it.Kind != stream.ItemGap {
		t.Fatalf("an event stream after Renew: %s, want a gap", describe(it))
	}
	next := r.Create(stream.Config{Channels: []stream.ChannelSpec{byteChan("stdout", stream.Drop, 0)}})
	if next.ID>>32 == running.ID>>32 {
		t.Fatal("a new stream got an id under the old prefix")
	}
	// Under the old prefix, ids it issued and that expired are expired;
	// those it never issued never were (not expired).
	if !r.IsExpired(ended.ID) {
		t.Error("the template's ended stream is not reported expired")
	}
	if r.IsExpired(events.ID + 1000) {
		t.Error("an id the old prefix never issued is reported expired")
	}
	if !stream.Possible(next.ID) || stream.Possible(5) || stream.Possible(next.ID&^(1<<32-1)) || stream.Possible(1<<53) {
		t.Error("Possible: wrong about ids")
	}
}
