package stream

import (
	"encoding/json"
	"testing"
	"time"
)

// TestIdentityCrossesAHandover: a registry that adopts another's identity
// has its instance id, and the next stream id it gives is past every id
// the other gave, under each of its prefixes (a Renew's included).
func TestIdentityCrossesAHandover(t *testing.T) {
	old := NewRegistry(time.Minute)
	defer old.Close()
	a := old.Create(Config{})
	old.Renew()
	b := old.Create(Config{})
	raw, _ := json.Marshal(old.Identity())

	var id Identity
	if err := json.Unmarshal(raw, &id); err != nil {
		t.Fatal(err)
	}
	fresh := NewRegistry(time.Minute)
	defer fresh.Close()
	if err := fresh.AdoptIdentity(id); err != nil {
		t.Fatal(err)
	}
	if fresh.Instance() != old.Instance() {
		t.Fatalf("instance %s, want %s", fresh.Instance(), old.Instance())
	}
	c := fresh.Create(Config{})
	if c.ID <= b.ID || c.ID>>idBits != b.ID>>idBits {
		t.Fatalf("the new agent's first id %d, after the old one's %d (and %d before its renewal)", c.ID, b.ID, a.ID)
	}
	if !fresh.ownsLocked(a.ID) {
		t.Fatalf("the adopted registry does not own the id %d its instance gave before a renewal", a.ID)
	}
	if err := fresh.AdoptIdentity(id); err == nil {
		t.Fatal("a registry with streams adopted an identity")
	}
	empty := NewRegistry(time.Minute)
	defer empty.Close()
	if err := empty.AdoptIdentity(Identity{ID: "x"}); err == nil {
		t.Fatal("an identity without prefixes was adopted")
	}
}
