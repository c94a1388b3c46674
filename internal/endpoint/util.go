package endpoint

import (
	"bytes"
	"io"
	"os"
	"strings"

	"github.com/rayito/rayito-agent/internal/proc"
)

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func containsAny(s, chars string) bool { return strings.ContainsAny(s, chars) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// procSpecFor is a spec that only checks that a user can run a program.
func procSpecFor(user string) proc.Spec {
	return proc.Spec{Argv: []string{"/bin/sh"}, User: user}
}
