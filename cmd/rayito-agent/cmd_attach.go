package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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

func attachCmd(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runAttach(ctx, args, os.Stdout, os.Stderr)
}

// cursorList collects repeated --from CHANNEL=CURSOR flags.
type cursorList map[string]uint64

func (c cursorList) String() string { return "" }

func (c cursorList) Set(kv string) error {
	name, v, ok := strings.Cut(kv, "=")
	n, err := strconv.ParseUint(v, 10, 64)
	if !ok || name == "" || err != nil {
		return fmt.Errorf("want CHANNEL=CURSOR (stdout=1024, events=10), got %q", kv)
	}
	c[name] = n
	return nil
}

// runAttach is `rayito-agent attach`: find a stream again (by id, pid or
// tag, as exec --tag named it), replay what it retained from the cursors
// given (default: from the start), then follow it live, as the command
// for its kind would show it: a process's stdout and stderr (exiting
// with its exit code), a terminal's output, a watch's events as JSON
// lines, a cell's outputs. Interrupting detaches and leaves the stream
// running.
func runAttach(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("attach", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	pid := fs.Int("pid", 0, "the stream of this process id (the newest, a running one first)")
	tag := fs.String("tag", "", "the stream with this tag (the newest, a running one first)")
	instance := fs.String("instance", "", "refuse if the agent is no longer this instance (it restarted: its streams are gone)")
	from := cursorList{}
	fs.Var(from, "from", "CHANNEL=CURSOR to replay from: a byte offset for stdout, stderr, pty, a seq for events (repeatable; default: from the start)")
	ids, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o := client.AttachOptions{Pid: *pid, Tag: *tag, From: from, Instance: *instance}
	given := len(ids)
	if *pid != 0 {
		given++
	}
	if *tag != "" {
		given++
	}
	if given != 1 || len(ids) > 1 {
		fs.Usage()
		return 2
	}
	if len(ids) == 1 {
		if o.Stream, err = strconv.ParseUint(ids[0], 10, 64); err != nil || o.Stream == 0 {
			fmt.Fprintf(stderr, "rayito-agent attach: %q is not a stream id\n", ids[0])
			return 2
		}
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "rayito-agent attach:", err)
		return exitClientError
	}
	c, err := dialAgent(*url)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	kind, err := kindOf(ctx, c, o)
	if err != nil {
		return fail(err)
	}
	switch kind {
	case client.KindProcess:
		o.OnStdout = func(b []byte) { stdout.Write(b) }
		o.OnStderr = func(b []byte) { stderr.Write(b) }
		p, err := c.Attach(ctx, o)
		if err != nil {
			return fail(err)
		}
		return followExit(ctx, p.Wait, p.Detach, fail)
	case client.KindPTY:
		o.OnOutput = func(b []byte) { stdout.Write(b) }
		p, err := c.AttachPTY(ctx, o)
		if err != nil {
			return fail(err)
		}
		return followExit(ctx, p.Wait, p.Detach, fail)
	case client.KindWatch:
		w, err := c.AttachWatch(ctx, o)
		if err != nil {
			return fail(err)
		}
		return followWatch(ctx, w, stdout, stderr)
	case client.KindCell:
		cell, err := c.AttachCell(ctx, o)
		if err != nil {
			return fail(err)
		}
		return followCell(ctx, cell, stdout, stderr, fail)
	}
	return fail(fmt.Errorf("streams of kind %s cannot be followed here", kind))
}

// kindOf finds the kind of the stream o names, as the agent would pick it.
func kindOf(ctx context.Context, c *client.Client, o client.AttachOptions) (client.Kind, error) {
	if o.Instance != "" && o.Instance != c.Instance() {
		return "", fmt.Errorf("the agent restarted: it is instance %s, not %s; the streams of %s are gone", c.Instance(), o.Instance, o.Instance)
	}
	streams, err := c.List(ctx, "")
	if err != nil {
		return "", err
	}
	var best *client.StreamInfo
	for i := range streams {
		s := &streams[i]
		if (o.Stream != 0 && s.Stream != o.Stream) || (o.Pid != 0 && s.Pid != o.Pid) || (o.Tag != "" && s.Tag != o.Tag) {
			continue
		}
		// The newest, a running one before an ended one (list is in id order).
		if best == nil || best.State != "running" || s.State == "running" {
			best = s
		}
	}
	if best == nil {
		// Let the agent say why (it knows whether the agent restarted).
		_, err := c.Attach(ctx, o)
		if err == nil {
			err = errors.New("the stream is gone")
		}
		return "", err
	}
	return best.Kind, nil
}

// followExit waits for a process or terminal to end and exits with its
// exit code; an interrupt detaches instead.
func followExit(ctx context.Context, wait func(context.Context) (client.ExitStatus, error), detach func(context.Context) error, fail func(error) int) int {
	st, err := wait(ctx)
	if ctx.Err() != nil {
		return detachAfter(detach)
	}
	if err != nil {
		return fail(err)
	}
	return st.ExitCode()
}

// detachAfter detaches once the user interrupted, and exits 130 as an
// interrupted command does.
func detachAfter(detach func(context.Context) error) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	detach(ctx)
	return 130
}

func followWatch(ctx context.Context, w *client.Watch, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	for {
		ev, err := w.Next(ctx)
		var gap *client.GapError
		switch {
		case err == nil:
			enc.Encode(ev)
		case errors.As(err, &gap):
			fmt.Fprintf(stderr, "rayito-agent attach: events %d to %d were lost\n", gap.From, gap.To-1)
		case errors.Is(err, io.EOF):
			end := w.End()
			fmt.Fprintf(stderr, "rayito-agent attach: the watch ended (%s): %s\n", end.Reason, end.Message)
			if end.Reason == client.ReasonError {
				return 1
			}
			return 0
		case ctx.Err() != nil:
			return detachAfter(w.Detach)
		default:
			fmt.Fprintln(stderr, "rayito-agent attach:", err)
			return exitClientError
		}
	}
}

func followCell(ctx context.Context, cell *client.Cell, stdout, stderr io.Writer, fail func(error) int) int {
	out := cellPrinter(stdout, stderr)
	for {
		ev, err := cell.Next(ctx)
		var gap *client.GapError
		switch {
		case err == nil:
			out.event(ev)
		case errors.As(err, &gap):
			fmt.Fprintf(stderr, "rayito-agent attach: outputs %d to %d were lost\n", gap.From, gap.To-1)
		case errors.Is(err, io.EOF):
			ex, err := cell.Wait(ctx)
			if err != nil {
				return fail(err)
			}
			if ex.Message != "" {
				fmt.Fprintln(stderr, "rayito-agent attach:", ex.Message)
			}
			if ex.Status != client.StatusOK {
				return 1
			}
			return 0
		case ctx.Err() != nil:
			return detachAfter(cell.Detach)
		default:
			return fail(err)
		}
	}
}
