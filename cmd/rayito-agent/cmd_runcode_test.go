package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunCodeCommand: outputs stream to ours, the exit code is the cell's
// status, code and input() come from stdin.
func TestRunCodeCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	cases := []struct {
		name           string
		args           []string
		stdin          string
		code           int
		stdout, stderr string
	}{
		{"result", []string{"x = 41\nprint('hi')\nx + 1"}, "", 0, "hi\n42\n", ""},
		{"state", []string{"x"}, "", 0, "41\n", ""},
		{"stderr", []string{"import sys; print('oops', file=sys.stderr)"}, "", 0, "", "oops\n"},
		{"error", []string{"1/0"}, "", 1, "", "ZeroDivisionError"},
		{"code from stdin", []string{"-"}, "print(6*7)\n", 0, "42\n", ""},
		{"input", []string{"print('hello', input('name? '))"}, "bob\n", 0, "hello bob\n", "name? "},
		{"timeout", []string{"--timeout", "300ms", "import time; time.sleep(30)"}, "", 1, "", "timed out"},
		{"unknown kernel", []string{"--kernel", "k999", "1"}, "", 1, "", "not_found"},
		{"no code", nil, "", 2, "", "usage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runCode(append([]string{"--url", url}, tc.args...), strings.NewReader(tc.stdin), &out, &errb)
			if code != tc.code || out.String() != tc.stdout || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, stderr containing %q", code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
			}
			// Not a terminal: a traceback's colours would be noise.
			if strings.Contains(errb.String(), "\x1b") {
				t.Fatalf("stderr has terminal escapes: %q", errb.String())
			}
		})
	}
}
