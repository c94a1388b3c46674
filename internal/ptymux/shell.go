package ptymux

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// passwdFile is where login shells are looked up. Users that only exist in
// other NSS databases fall back to fallbackShells.
const passwdFile = "/etc/passwd"

// fallbackShells are tried in order when the user's own shell is unknown,
// missing, or a refusal such as nologin.
var fallbackShells = [...]string{"/bin/bash", "/bin/sh"}

// loginShell returns the shell to run for user: field 7 of its passwd entry
// in the file at passwd, if that is an executable shell, else the first
// fallback that exists.
func loginShell(passwd, user string) string {
	if sh := passwdShell(passwd, user); sh != "" && !refusesLogin(sh) && isExecutable(sh) {
		return sh
	}
	for _, sh := range fallbackShells {
		if isExecutable(sh) {
			return sh
		}
	}
	return fallbackShells[len(fallbackShells)-1]
}

// passwdShell returns the shell field of user's entry, or "".
func passwdShell(passwd, user string) string {
	f, err := os.Open(passwd)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[0] == user {
			return fields[6]
		}
	}
	return ""
}

// loginArgv0 makes argv[0] of a login shell: a leading "-" is how login(1)
// and sshd ask every shell (bash, dash, zsh, fish) to act as a login shell,
// while a "-l" flag is not understood by all of them.
func loginArgv0(shell string) string {
	return "-" + filepath.Base(shell)
}

// refusesLogin reports passwd shells meaning "no interactive login"; the
// agent was asked for a terminal anyway, so it gives one with a real shell.
func refusesLogin(shell string) bool {
	switch filepath.Base(shell) {
	case "nologin", "false", "true":
		return true
	}
	return false
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
