package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// defaultURL is where client subcommands find the agent without --url:
// RAYITO_URL, else the address make run serves on.
var defaultURL = envOr("RAYITO_URL", "ws://127.0.0.1:49983")

// exitClientError is the exit code of a client command that failed on its
// own (bad flags, no agent), as opposed to the command it ran.
const exitClientError = 125

// envList collects repeated --env K=V flags.
type envList map[string]string

func (e envList) String() string { return "" }

func (e envList) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", kv)
	}
	e[k] = v
	return nil
}

// runExec is `rayito-agent exec`: run a command in the sandbox, stream its
// output to ours, exit with its exit code (128+n when killed by signal n).
func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := commandFlags("exec", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	cwd := fs.String("cwd", "", "working directory of the command")
	user := fs.String("user", "", "user to run the command as")
	tag := fs.String("tag", "", "tag of the stream, to find it again with attach")
	timeout := fs.Duration("timeout", 0, "kill the command's process group after this long (e.g. 30s)")
	fwdStdin := fs.Bool("stdin", false, "forward our stdin to the command")
	keepAwake := fs.Bool("keep-awake", false, "keep the sandbox awake while the command runs, even if it prints nothing")
	detach := fs.Bool("detach", false, "start the command, print its stream and pid, and return; it runs on (attach follows it)")
	env := envList{}
	fs.Var(env, "env", "K=V environment variable for the command (repeatable)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "rayito-agent exec:", err)
		return exitClientError
	}

	if *detach && *fwdStdin {
		fmt.Fprintln(stderr, "rayito-agent exec: --detach and --stdin do not go together: a detached command has nobody to read our stdin")
		return 2
	}
	ctx := context.Background()
	c, err := dialAgent(*url)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	if *detach {
		return execDetached(ctx, c, client.ExecOptions{
			Argv: fs.Args(), Env: env, Cwd: *cwd, User: *user, Tag: *tag, Timeout: *timeout, KeepAwake: *keepAwake,
		}, stdout, stderr, fail)
	}
	p, err := c.Exec(ctx, client.ExecOptions{
		Argv: fs.Args(), Env: env, Cwd: *cwd, User: *user, Tag: *tag, Timeout: *timeout, Stdin: *fwdStdin, KeepAwake: *keepAwake,
		OnStdout: func(b []byte) { stdout.Write(b) },
		OnStderr: func(b []byte) { stderr.Write(b) },
	})
	if err != nil {
		return fail(err)
	}

	// Signals to us go to the command's process group, as with a local
	// command in a terminal.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case s := <-sigs:
				p.Signal(ctx, forwardedSignal(s))
			case <-p.Done():
				return
			}
		}
	}()
	if *fwdStdin {
		go func() {
			if _, err := io.Copy(p, stdin); err == nil {
				p.CloseStdin(ctx)
			}
		}()
	}
	st, err := p.Wait(ctx)
	if err != nil {
		return fail(err)
	}
	return st.ExitCode()
}

// execDetached starts the command, prints "stream S pid P [tag T]" and
// how to follow it, and detaches: the command runs on, its output kept by
// the agent for whoever attaches.
func execDetached(ctx context.Context, c *client.Client, o client.ExecOptions, stdout, stderr io.Writer, fail func(error) int) int {
	p, err := c.Exec(ctx, o)
	if err != nil {
		return fail(err)
	}
	line := fmt.Sprintf("stream %d pid %d", p.Stream(), p.Pid())
	follow := strconv.FormatUint(p.Stream(), 10)
	if o.Tag != "" {
		line += " tag " + o.Tag
		follow = "--tag " + o.Tag
	}
	fmt.Fprintln(stdout, line)
	fmt.Fprintf(stderr, "follow it with: rayito-agent attach %s\n", follow)
	if err := p.Detach(ctx); err != nil {
		return fail(err)
	}
	return 0
}

func forwardedSignal(s os.Signal) client.Signal {
	switch s {
	case syscall.SIGINT:
		return client.SIGINT
	case syscall.SIGHUP:
		return client.SIGHUP
	}
	return client.SIGTERM
}

// runHealth is `rayito-agent health`: print the agent's /health as is
// (all of it with RAYITO_ACCESS_TOKEN, the public part without), over TCP
// or vsock as --url says.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("health", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "rayito-agent health:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// With RAYITO_ACCESS_TOKEN set, all of it; without, what anyone sees.
	raw, err := host(*url).HealthJSON(ctx)
	if err != nil {
		return fail(explainToken(err))
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(raw)); err != nil {
		return fail(err)
	}
	return 0
}
