package jupyter

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"go.uber.org/zap"
)

// TestStaleConnDirsRemoved: connection directories of an agent that is
// gone are removed when a manager starts; those of a running agent, and
// anything else, stay.
func TestStaleConnDirsRemoved(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone, err := proctest.Run(env.reaper, "true")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "connection.json"), []byte("{}"), 0o600)
		return d
	}
	stale := mk(connDirPrefix + strconv.Itoa(gone) + "-123")
	mine := mk(connDirPrefix + strconv.Itoa(os.Getpid()) + "-456")
	parent := mk(connDirPrefix + strconv.Itoa(os.Getppid()) + "-789")
	other := mk(connDirPrefix + "4242") // not ours to judge
	fresh, err := newConnDir()
	if err != nil {
		t.Fatal(err)
	}
	removeStaleConnDirs(zap.NewNop())
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the dir of a gone agent is still there: %v", err)
	}
	for _, d := range []string{mine, parent, other, fresh} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was removed: %v", d, err)
		}
	}
	if filepath.Dir(fresh) != tmp || filepath.Base(fresh)[:len(connDirPrefix)] != connDirPrefix {
		t.Fatalf("new connection dir %s", fresh)
	}
}
