package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// runWatch is `rayito-agent watch PATH [-r]`: print a directory's changes
// as JSON lines until ctx ends (the watch is then removed) or the watch
// ends on its own (the directory went away).
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("watch", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	recursive := fs.Bool("r", false, "watch the whole tree")
	paths, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(paths) != 1 {
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "rayito-agent watch:", err)
		return 1
	}
	c, err := dialAgent(*url)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	w, err := c.Watch(ctx, paths[0], *recursive)
	if err != nil {
		return fail(err)
	}
	enc := json.NewEncoder(stdout)
	for {
		ev, err := w.Next(ctx)
		var gap *client.GapError
		switch {
		case err == nil:
			if err := enc.Encode(ev); err != nil {
				return fail(err)
			}
		case errors.As(err, &gap):
			fmt.Fprintf(stderr, "rayito-agent watch: events %d to %d were lost\n", gap.From, gap.To-1)
		case errors.Is(err, io.EOF):
			end := w.End()
			fmt.Fprintf(stderr, "rayito-agent watch: the watch ended (%s): %s\n", end.Reason, end.Message)
			if end.Reason == client.ReasonError {
				return 1
			}
			return 0
		case ctx.Err() != nil:
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Close(cctx); err != nil {
				return fail(err)
			}
			return 0
		default:
			return fail(err)
		}
	}
}

// parseInterleaved parses flags that may come after positional arguments
// (`watch PATH -r`), which flag.Parse alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
