package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// runResume is `rayito-agent resume`: tell the agent its VM was just
// resumed (POST /v1/resume) and print its answer, /health once the resume
// sequence is done.
func runResume(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	id := fs.String("id", "", "resume id: retries with the same id count as one resume")
	now := fs.Bool("time-now", false, "set the sandbox's clock to this machine's")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: rayito-agent resume [--url URL] [--id ID] [--time-now]")
		return 2
	}
	o := client.ResumeOptions{ResumeID: *id}
	if *now {
		o.TimeUnixNs = time.Now().UnixNano()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := client.Host{URL: *url, Token: os.Getenv("RAYITO_ACCESS_TOKEN")}.Resume(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "rayito-agent resume:", err)
		return 1
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		fmt.Fprintln(stderr, "rayito-agent resume:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}
