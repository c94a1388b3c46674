package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/client"
	"go.uber.org/zap/zaptest"
)

var errNotFound = errors.New("no such file in the guest")

// dial connects a Go client to the agent at url with the image's token;
// the client is closed when the test ends.
func dial(t *testing.T, ctx context.Context, url, token string, opts client.Options) *client.Client {
	t.Helper()
	opts.Token = token
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t).Named("client")
	}
	c, err := client.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial the agent at %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// guest does things inside the VM through the real agent.
type guest struct{ c *client.Client }

// output is what a finished command printed and how it ended.
type output struct {
	stdout, stderr string
	status         client.ExitStatus
}

// exec runs a command to its end and collects its output.
func (g guest) exec(ctx context.Context, o client.ExecOptions, stdin []byte) (output, error) {
	o.Stdin = stdin != nil
	p, err := g.c.Exec(ctx, o)
	if err != nil {
		return output{}, err
	}
	var stderr []byte
	var errErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		stderr, errErr = io.ReadAll(p.Stderr())
	}()
	if stdin != nil {
		if _, err := p.Write(stdin); err != nil {
			return output{}, fmt.Errorf("stdin: %w", err)
		}
		if err := p.CloseStdin(ctx); err != nil {
			return output{}, fmt.Errorf("close stdin: %w", err)
		}
	}
	stdout, err := io.ReadAll(p.Stdout())
	<-done
	if err = errors.Join(err, errErr); err != nil {
		return output{}, err
	}
	st, err := p.Wait(ctx)
	return output{stdout: string(stdout), stderr: string(stderr), status: st}, err
}

// run runs argv and returns its stdout; anything but exit status 0 is an
// error.
func (g guest) run(ctx context.Context, argv ...string) (string, error) {
	out, err := g.exec(ctx, client.ExecOptions{Argv: argv}, nil)
	if err != nil {
		return "", fmt.Errorf("%q: %w", argv, err)
	}
	if out.status.ExitCode() != 0 {
		return out.stdout, fmt.Errorf("%q: %s: %s", argv, out.status, out.stderr)
	}
	return out.stdout, nil
}

// sh runs a shell script with args as $1...
func (g guest) sh(ctx context.Context, script string, args ...string) (string, error) {
	return g.run(ctx, append([]string{"/bin/sh", "-c", script, "sh"}, args...)...)
}

func (g guest) WriteFile(ctx context.Context, path string, data []byte) error {
	out, err := g.exec(ctx, client.ExecOptions{Argv: []string{"/bin/sh", "-c", `cat > "$1"`, "sh", path}}, data)
	if err == nil && out.status.ExitCode() != 0 {
		err = fmt.Errorf("%s: %s", out.status, out.stderr)
	}
	if err != nil {
		return fmt.Errorf("write %s in the guest: %w", path, err)
	}
	return nil
}

func (g guest) ReadFile(ctx context.Context, path string) ([]byte, error) {
	const missing = 3
	out, err := g.exec(ctx, client.ExecOptions{Argv: []string{"/bin/sh", "-c", `[ -e "$1" ] || exit 3; cat "$1"`, "sh", path}}, nil)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read %s in the guest: %w", path, err)
	case out.status.ExitCode() == missing:
		return nil, fmt.Errorf("%s: %w", path, errNotFound)
	case out.status.ExitCode() != 0:
		return nil, fmt.Errorf("read %s in the guest: %s: %s", path, out.status, out.stderr)
	}
	return []byte(out.stdout), nil
}

// agentPid is the agent's process id: the parent of what it runs.
func (g guest) agentPid(ctx context.Context) (int, error) {
	out, err := g.sh(ctx, `echo $PPID`)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// killAgent makes the agent die as a crash would (SIGKILL from a command
// it runs). The client's connection goes with it, so use one that does
// not reconnect.
func (g guest) killAgent(ctx context.Context) error {
	p, err := g.c.Exec(ctx, client.ExecOptions{Argv: []string{"/bin/sh", "-c", `kill -KILL $PPID`}})
	if err != nil {
		return err
	}
	_, err = p.Wait(ctx)
	if err == nil || errors.Is(err, client.ErrConnectionLost) {
		return nil
	}
	return err
}

// checkFiles reads each file back and compares.
func (g guest) checkFiles(t *testing.T, ctx context.Context, files []guestFile) {
	t.Helper()
	for _, f := range files {
		got, err := g.ReadFile(ctx, f.path)
		if err != nil || !bytes.Equal(got, f.data) {
			t.Errorf("%s = %q, %v; want %q", f.path, got, err, f.data)
		}
	}
}

// guestFile is a file the test writes before a snapshot and expects back.
type guestFile struct {
	path string
	data []byte
}

// filesBeforeSnapshot are one on the disk and one only in memory.
func filesBeforeSnapshot(tag string) []guestFile {
	return []guestFile{
		{"/home/user/on-disk-" + tag + ".txt", []byte("on the disk before snapshot " + tag + "\n")},
		// /tmp is a tmpfs: this one survives only if memory was restored.
		{"/tmp/in-memory-" + tag + ".txt", []byte("only in guest memory before snapshot " + tag + "\n")},
	}
}
