package main

import (
	"context"
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
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	o := client.ResumeOptions{ResumeID: *id}
	if *now {
		o.TimeUnixNs = time.Now().UnixNano()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host(*url).Resume(ctx, o)
	return printAnswer("resume", h, explainToken(err), stdout, stderr)
}
