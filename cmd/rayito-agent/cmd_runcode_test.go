package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
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

// TestRunCodeRich: a rich output is named with what it holds ("[image/png
// 1x1]"), --save writes it to a file, --json prints the cell's events.
func TestRunCodeRich(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	code := "from IPython.display import display, Image, HTML\nimport base64\n" +
		"display(Image(data=base64.b64decode('" + png + "')))\ndisplay(HTML('<b>bold</b>'))"
	run := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if c := runCode(append([]string{"--url", url}, args...), strings.NewReader(""), &out, &errb); c != 0 {
			t.Fatalf("%v: exit %d, %s", args, c, errb.String())
		}
		return out.String(), errb.String()
	}
	out, _ := run(code)
	if !strings.Contains(out, "[image/png 1x1]\n") || !strings.Contains(out, "[text/html 11 B]\n") {
		t.Fatalf("rich outputs shown as:\n%s", out)
	}
	dir := filepath.Join(t.TempDir(), "out")
	out, _ = run("--save", dir, code)
	img, err := os.ReadFile(filepath.Join(dir, "output-1.png"))
	want, _ := base64.StdEncoding.DecodeString(png)
	if err != nil || !bytes.Equal(img, want) {
		t.Fatalf("--save wrote %d bytes of the PNG, %v", len(img), err)
	}
	if html, _ := os.ReadFile(filepath.Join(dir, "output-2.html")); string(html) != "<b>bold</b>" {
		t.Fatalf("--save wrote the HTML as %q", html)
	}
	if !strings.Contains(out, "saved to "+filepath.Join(dir, "output-1.png")) {
		t.Fatalf("--save does not name its files:\n%s", out)
	}
	out, _ = run("--json", "print('hi')\n"+code+"\n6 * 7")
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		types = append(types, ev["type"].(string))
		if ev["type"] == "end" && ev["status"] != "ok" {
			t.Fatalf("--json end %v", ev)
		}
	}
	if strings.Join(types, " ") != "stdout display display result end" {
		t.Fatalf("--json events %v:\n%s", types, out)
	}
}
