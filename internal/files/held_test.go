package files

import (
	"os"
	"path/filepath"
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
	for i := range cap(m.held) + 8 {
		if f, err := m.openHeld(u, secret); err == nil {
			m.closeHeld(f)
			t.Fatalf("open %d of root's 0600 file as nobody succeeded", i)
		}
	}
	f, err := m.openHeld(u, open)
	if err != nil {
		t.Fatalf("after %d failed opens, an open nobody may make: %v", cap(m.held)+8, err)
	}
	m.closeHeld(f)
	if n := len(m.held); n != 0 {
		t.Errorf("%d slots still taken after every open was closed or failed", n)
	}
}
