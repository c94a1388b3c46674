package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestAttachCommand: attach finds a stream again by id, pid or tag and
// replays it from the start or from a cursor, as the command for its kind
// shows it; what it cannot find it says.
func TestAttachCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, client.Options{Token: "cli-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", "echo one; echo two >&2; exit 3"}, Tag: "job"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatUint(p.Stream(), 10)
	attach := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runAttach(ctx, append([]string{"--url", url}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"by tag", []string{"--tag", "job"}, 3, "one\n", "two\n"},
		{"by id", []string{id}, 3, "one\n", "two\n"},
		{"by pid", []string{"--pid", strconv.Itoa(p.Pid())}, 3, "one\n", "two\n"},
		{"from a cursor", []string{"--tag", "job", "--from", "stdout=2", "--from", "stderr=4"}, 3, "e\n", ""},
		{"this instance", []string{id, "--instance", c.Instance()}, 3, "one\n", "two\n"},
		{"unknown tag", []string{"--tag", "nope"}, exitClientError, "", "not_found"},
		{"another instance", []string{id, "--instance", "0123abcd"}, exitClientError, "", "restarted"},
		{"cursor beyond the end", []string{id, "--from", "stdout=99"}, exitClientError, "", "bad_request"},
		{"bad cursor", []string{id, "--from", "stdout"}, 2, "", "CHANNEL=CURSOR"},
		{"two selectors", []string{id, "--tag", "job"}, 2, "", "usage"},
		{"nothing", nil, 2, "", "usage"},
	} {
		code, out, errOut := attach(tc.args...)
		if code != tc.code || out != tc.stdout || !strings.Contains(errOut, tc.stderr) || (tc.stderr == "" && errOut != "") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.name, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}

	// A cell replays its outputs and exits with its status.
	cell, err := c.DefaultKernel().Run(ctx, "print('from the cell')\n6 * 7", client.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cell.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := attach(strconv.FormatUint(cell.Stream(), 10)); code != 0 || out != "from the cell\n42\n" {
		t.Errorf("attach a cell: exit %d, %q, %q", code, out, errOut)
	}

	// A watch prints its events until interrupted, then detaches.
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	var out syncBuffer
	done := make(chan int)
	go func() {
		done <- runAttach(wctx, []string{"--url", url, strconv.FormatUint(w.Stream(), 10)}, &out, &bytes.Buffer{})
	}()
	for !strings.Contains(out.String(), "\n") && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if code := <-done; code != 130 || !strings.Contains(out.String(), `"op":"create"`) || !strings.Contains(out.String(), filepath.Join(dir, "f")) {
		t.Fatalf("attach a watch: exit %d, %q", code, out.String())
	}
}
