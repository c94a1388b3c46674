package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// runResume is `rayito-agent resume`: tell the agent its VM was just
// resumed (POST /v1/resume) and print its answer, /health once the resume
// sequence is done.
func runResume(args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("resume", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	id := fs.String("id", "", "resume id: retries with the same id count as one resume")
	now := fs.Bool("time-now", false, "set the sandbox's clock to this machine's")
	entropy := fs.Bool("entropy", false, "send 32 fresh random bytes of this machine for the sandbox's CRNG re-key")
	sandbox := fs.String("sandbox-id", "", "the sandbox this copy of the snapshot now is: another id than the last gives the agent a new identity")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	o := client.ResumeOptions{ResumeID: *id, SandboxID: *sandbox}
	if *entropy {
		o.Entropy = make([]byte, 32)
		if _, err := rand.Read(o.Entropy); err != nil {
			fmt.Fprintf(stderr, "resume: no randomness here: %v\n", err)
			return 1
		}
	}
	if *now {
		o.TimeUnixNs = time.Now().UnixNano()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host(*url).Resume(ctx, o)
	return printAnswer("resume", h, explainToken(err), stdout, stderr)
}
