package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rayito/rayito-agent/client"
)

func initCmd(args []string) int { return runInit(args, os.Stdout, os.Stderr) }

// runInit is `rayito-agent init`: configure the agent as the host does
// after boot (POST /v1/init) and print its answer. On an agent started
// without a token the first init needs none and usually sets one; every
// later init needs the token (RAYITO_ACCESS_TOKEN).
func runInit(args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("init", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	token := fs.String("set-token", "", "new access token for every later request")
	user := fs.String("default-user", "", "user for processes that name none")
	cwd := fs.String("default-cwd", "", "working directory for processes that name none")
	idle := fs.Int("max-idle-seconds", 0, "idle policy: the sandbox is idle after this many seconds without traffic (at least 60)")
	now := fs.Bool("time-now", false, "set the sandbox's clock to this machine's (if the agent sets clocks, see serve --set-clock)")
	env := envList{}
	fs.Var(env, "env", "K=V environment variable for later processes (repeatable)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	o := client.InitOptions{AccessToken: *token, Env: env, DefaultUser: *user, DefaultCwd: *cwd, MaxIdleSeconds: *idle}
	if *now {
		o.TimeUnixNs = time.Now().UnixNano()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host(*url).Init(ctx, o)
	return printAnswer("init", h, explainToken(err), stdout, stderr)
}

// printAnswer prints a host call's answer (/health as it was after the
// call) as indented JSON, or the error.
func printAnswer(name string, h any, err error, stdout, stderr io.Writer) int {
	if err == nil {
		var b []byte
		if b, err = json.MarshalIndent(h, "", "  "); err == nil {
			fmt.Fprintf(stdout, "%s\n", b)
			return 0
		}
	}
	fmt.Fprintf(stderr, "rayito-agent %s: %v\n", name, err)
	return 1
}
