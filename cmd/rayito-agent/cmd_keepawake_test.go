package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestKeepAwakeFlags: `exec --keep-awake` and `run-code --keep-awake`
// hold the sandbox awake while their command or cell runs, and the hold
// ends with it; without the flag there is none.
func TestKeepAwakeFlags(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	host := client.Host{URL: url, Token: "cli-token"}
	holds := func() []client.HoldInfo {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr, err := host.Traffic(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Holds
	}
	waitHolds := func(n int) []client.HoldInfo {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			l := holds()
			if len(l) == n {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d holds, want %d: %+v", len(l), n, l)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	var out, errb bytes.Buffer
	if code := runExec([]string{"--url", url, "--", "true"}, nil, &out, &errb); code != 0 || len(holds()) != 0 {
		t.Fatalf("exec without --keep-awake: exit %d (%s), holds %+v", code, errb.String(), holds())
	}

	// Each runs until we write to its stdin: the command reads a line,
	// the cell asks for input.
	for _, tc := range []struct {
		name string
		run  func(stdin io.Reader, stdout, stderr io.Writer) int
	}{
		{"exec", func(in io.Reader, o, e io.Writer) int {
			return runExec([]string{"--url", url, "--keep-awake", "--stdin", "--", "head", "-n1"}, in, o, e)
		}},
		{"run-code", func(in io.Reader, o, e io.Writer) int {
			return runCode([]string{"--url", url, "--keep-awake", "print(input())"}, in, o, e)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := io.Pipe()
			var out, errb bytes.Buffer
			exit := make(chan int, 1)
			go func() { exit <- tc.run(r, &out, &errb) }()
			if l := waitHolds(1); l[0].Stream == 0 || !l[0].Counting {
				t.Fatalf("hold of the %s: %+v", tc.name, l[0])
			}
			io.WriteString(w, "done\n")
			if code := <-exit; code != 0 || out.String() != "done\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
			}
			w.Close()
			waitHolds(0)
		})
	}
}
