package ptymux_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rayito/rayito-agent/internal/ptymux"
)

func TestLoginShellLookup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(dir, "passwd")
	entries := "" +
		"dash:x:1000:1000::/home/dash:/usr/bin/dash\n" +
		"gone:x:1001:1001::/home/gone:/usr/bin/no-such-shell\n" +
		"nologin:x:1002:1002::/nonexistent:/usr/sbin/nologin\n" +
		"false:x:1003:1003::/nonexistent:/bin/false\n" +
		"notexec:x:1004:1004::/nonexistent:" + notExec + "\n" +
		"short:x:1005\n" +
		"empty:x:1006:1006::/home/empty:\n"
	if err := os.WriteFile(passwd, []byte(entries), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, user, want string }{
		{passwd, "dash", "/usr/bin/dash"},
		{passwd, "gone", "/bin/bash"},
		{passwd, "nologin", "/bin/bash"},
		{passwd, "false", "/bin/bash"},
		{passwd, "notexec", "/bin/bash"},
		{passwd, "short", "/bin/bash"},
		{passwd, "empty", "/bin/bash"},
		{passwd, "unknown", "/bin/bash"},
		{filepath.Join(dir, "missing"), "dash", "/bin/bash"},
	} {
		t.Run(fmt.Sprintf("%s/%s", filepath.Base(tc.file), tc.user), func(t *testing.T) {
			if got := ptymux.LoginShell(tc.file, tc.user); got != tc.want {
				t.Fatalf("LoginShell = %q, want %q", got, tc.want)
			}
		})
	}
}

// The manager starts the shell the passwd file names, as a login shell.
func TestStartUsesPasswdShell(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/dash"); err != nil {
		t.Skip("no dash on this machine")
	}
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/usr/bin/dash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newManager(t)
	m.SetPasswd(passwd)
	tm := start(t, m, ptymux.Options{User: "root", Env: map[string]string{"ENV": ""}})
	if len(tm.s.Argv) != 1 || tm.s.Argv[0] != "-dash" {
		t.Fatalf("argv %q, want [-dash]", tm.s.Argv)
	}
	tm.typ("echo \"$0:$SHELL:$((2*21))\"\r")
	tm.waitFor("-dash:/usr/bin/dash:42\r\n")
	tm.typ("exit 5\r")
	wantExit(t, tm.waitEnd(), 5)
}
