package proctest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/proc"
)

// AccountNames returns a user name and a group name no account has yet,
// for a test that adds them with Admin, and skips the test where it
// cannot (not root, or the shadow tools missing).
func AccountNames(t testing.TB) (user, group string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to add users")
	}
	for _, tool := range []string{"useradd", "groupadd", "usermod", "userdel", "groupdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	return "rayito-u" + hex.EncodeToString(suffix), "rayito-g" + hex.EncodeToString(suffix)
}

// Admin runs an account tool (useradd, usermod...) and fails the test if
// it fails. In a test process that runs a reaper, pass it as r: the
// command is then started through it (see Run); else r is nil.
func Admin(t testing.TB, r *proc.Reaper, argv ...string) {
	t.Helper()
	if r != nil {
		if _, err := Run(r, argv...); err != nil {
			t.Fatal(err)
		}
		return
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", argv, err, strings.TrimSpace(string(out)))
	}
}
