package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFailedHeldOpensGiveTheirSlotBack: as another user, opens that fail
// (a file the user may not read) give their descriptor slot back: after
// more failures than the budget holds, an open that can succeed does at
// once (with slots leaked, it waited heldWait and was refused as busy).
func TestFailedHeldOpensGiveTheirSlotBack(t *testing.T) {
	needRoot(t)
	m, _ := newManager(t)
	defer func(w time.Duration) { heldWait = w }(heldWait)
	heldWait = 50 * time.Millisecond
	u, err := m.User("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	openToAll(t, dir)
	secret, open := filepath.Join(dir, "secret"), filepath.Join(dir, "open")
	writeFile(t, secret, "no")
	os.Chmod(secret, 0o600)
	writeFile(t, open, "yes")
	os.Chmod(open, 0o644)
	for i := range m.held.max + 8 {
		if f, err := m.openHeld("", u, secret); err == nil {
			m.closeHeld("", f)
			t.Fatalf("open %d of root's 0600 file as nobody succeeded", i)
		}
	}
	f, err := m.openHeld("", u, open)
	if err != nil {
		t.Fatalf("after %d failed opens, an open nobody may make: %v", m.held.max+8, err)
	}
	m.closeHeld("", f)
	if n := m.held.used; n != 0 {
		t.Errorf("%d slots still taken after every open was closed or failed", n)
	}
}

// TestHeldFilesShared: one client holding downloads open (stalled
// readers) gets no more than its share of the descriptors; another
// client's download opens at once, and the greedy one's next waits and is
// refused as busy, saying whose share is full.
func TestHeldFilesShared(t *testing.T) {
	m, _ := newManager(t)
	defer func(w time.Duration) { heldWait = w }(heldWait)
	heldWait = 50 * time.Millisecond
	m.held = newHeldSlots(8)
	p := filepath.Join(t.TempDir(), "f")
	writeFile(t, p, "data")
	var greedy []*File
	defer func() {
		for _, f := range greedy {
			f.Close()
		}
	}()
	for i := range 4 {
		f, err := m.Open("10.0.0.1", "", p)
		if err != nil {
			t.Fatalf("open %d within the share: %v", i, err)
		}
		greedy = append(greedy, f)
	}
	if _, err := m.Open("10.0.0.1", "", p); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "this client (10.0.0.1)") {
		t.Fatalf("an open beyond the client's share: %v", err)
	}
	f, err := m.Open("10.0.0.2", "", p)
	if err != nil {
		t.Fatalf("another client's open while the first holds its share: %v", err)
	}
	f.Close()
	greedy[0].Close()
	greedy = greedy[1:]
	f, err = m.Open("10.0.0.1", "", p)
	if err != nil {
		t.Fatalf("the greedy client's open after it closed one: %v", err)
	}
	greedy = append(greedy, f)
}
