package main

import (
	"context"
	"io"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// runPause is the host's POST /v1/pause (or, with --abort, /v1/pause/abort)
// from the command line: what a host runs before it freezes the VM.
func runPause(args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("pause", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	mode := fs.String("mode", "", "memory (a memory snapshot follows; the default) or filesystem (only the disk is kept: freeze the filesystems)")
	shrink := fs.String("shrink", "", "none (the default), cache or all: how much memory to give back before the snapshot")
	deadline := fs.Duration("deadline", 0, "answer by then with what is done (default 1s)")
	thawAfter := fs.Duration("thaw-after", 0, "thaw by itself after this much of the guest's time without a resume (default 30s)")
	abort := fs.Bool("abort", false, "call the pause in place off instead: the sandbox runs again, same generation")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+*deadline)
	defer cancel()
	if *abort {
		a, err := host(*url).AbortPause(ctx)
		return printAnswer("pause", a, explainToken(err), stdout, stderr)
	}
	a, err := host(*url).Pause(ctx, client.PauseOptions{Mode: *mode, Shrink: *shrink,
		DeadlineMs: deadline.Milliseconds(), ThawAfterMs: thawAfter.Milliseconds()})
	return printAnswer("pause", a, explainToken(err), stdout, stderr)
}
