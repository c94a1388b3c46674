package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// runUpgrade is the host's POST /v1/upgrade from the command line: it
// sends a new agent binary (--binary, from the host's disk) or names one
// already in the guest (--path), and prints the answer; progress goes to
// stderr.
func runUpgrade(args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("upgrade", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	binary := fs.String("binary", "", "the new agent binary on this machine: sent in the body")
	path := fs.String("path", "", "the new agent binary's path in the guest instead (owned by root, writable by nobody else)")
	sum := fs.String("sha256", "", "the binary's SHA-256 in hex (computed from --binary when empty)")
	deadline := fs.Duration("deadline", 0, "from the call to the exec (default 10s)")
	id := fs.String("upgrade-id", "", "name the upgrade: a repeat with the same id gets the first one's answer (default: a new id)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 || (*binary == "") == (*path == "") {
		fmt.Fprintln(stderr, "rayito-agent upgrade: give --binary or --path")
		fs.Usage()
		return 2
	}
	o := client.UpgradeOptions{Path: *path, SHA256: *sum, DeadlineMs: deadline.Milliseconds(), UpgradeID: *id,
		Progress: func(msg string) { fmt.Fprintln(stderr, "rayito-agent upgrade:", msg) }}
	if *binary != "" {
		b, err := os.ReadFile(*binary)
		if err != nil {
			fmt.Fprintln(stderr, "rayito-agent upgrade:", err)
			return 1
		}
		o.Binary = b
		fmt.Fprintf(stderr, "rayito-agent upgrade: sending %s (%d bytes)\n", *binary, len(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+*deadline)
	defer cancel()
	a, err := host(*url).Upgrade(ctx, o)
	if err != nil && a.State != "" {
		// A failed upgrade: what happened, then the error.
		printAnswer("upgrade", a, nil, stdout, stderr)
	}
	if err == nil {
		fmt.Fprintf(stderr, "rayito-agent upgrade: %s to %s in %.0f ms, user work frozen %.0f ms\n", a.FromVersion, a.ToVersion, a.DurationMs, a.FrozenMs)
	}
	return printAnswer("upgrade", a, explainToken(err), stdout, stderr)
}
