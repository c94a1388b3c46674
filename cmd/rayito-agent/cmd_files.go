package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/rayito/rayito-agent/client"
)

func cpCmd(args []string) int {
	return runCp(args, os.Stdin, os.Stdout, os.Stderr, isTerminal(int(os.Stderr.Fd())))
}

func lsCmd(args []string) int    { return runLs(args, os.Stdout, os.Stderr) }
func statCmd(args []string) int  { return runStat(args, os.Stdout, os.Stderr) }
func rmCmd(args []string) int    { return runRm(args, os.Stdout, os.Stderr) }
func mkdirCmd(args []string) int { return runMkdir(args, os.Stdout, os.Stderr) }

// fileCommand is what the file subcommands share: flags --url and
// --user, and a connected client.
type fileCommand struct {
	name string
	fs   *flag.FlagSet
	url  *string
	user *string
	out  io.Writer
	errw io.Writer
}

func newFileCommand(name string, stdout, stderr io.Writer) *fileCommand {
	fc := &fileCommand{name: name, fs: commandFlags(name, stderr), out: stdout, errw: stderr}
	fc.url = fc.fs.String("url", defaultURL, "the agent's address")
	fc.user = fc.fs.String("user", "", "user the agent acts as (default: its default user)")
	return fc
}

// parse parses the flags and wants at least min arguments; ok false
// means exit with code.
func (fc *fileCommand) parse(args []string, min int) (code int, ok bool) {
	if err := fc.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fc.fs.NArg() < min {
		fc.fs.Usage()
		return 2, false
	}
	return 0, true
}

// arg is argument i as a path of the sandbox: a leading ':' (which cp
// requires, to tell the sandbox's paths from local ones) is taken off,
// so the same :PATH works with every file command.
func (fc *fileCommand) arg(i int) string { return remotePath(fc.fs.Arg(i)) }

// args is every argument as a path of the sandbox (arg).
func (fc *fileCommand) args() []string {
	out := make([]string, fc.fs.NArg())
	for i := range out {
		out[i] = fc.arg(i)
	}
	return out
}

// remotePath takes one leading ':' off p.
func remotePath(p string) string { return strings.TrimPrefix(p, ":") }

func (fc *fileCommand) fail(err error) int {
	fmt.Fprintf(fc.errw, "rayito-agent %s: %v\n", fc.name, err)
	return 1
}

// files dials the agent; close the client when done.
func (fc *fileCommand) files() (*client.Client, *client.Files, error) {
	c, err := dialAgent(*fc.url)
	if err != nil {
		return nil, nil, err
	}
	return c, c.Files().As(*fc.user), nil
}

// runLs is `rayito-agent ls`: list a directory of the sandbox.
func runLs(args []string, stdout, stderr io.Writer) int {
	fc := newFileCommand("ls", stdout, stderr)
	long := fc.fs.Bool("l", false, "long format: mode, owner, group, size, time")
	depth := fc.fs.Int("depth", 1, "levels to list (at most 16)")
	if code, ok := fc.parse(args, 1); !ok {
		return code
	}
	c, fsys, err := fc.files()
	if err != nil {
		return fc.fail(err)
	}
	defer c.Close()
	entries, err := fsys.List(context.Background(), fc.arg(0), *depth)
	if err != nil {
		return fc.fail(err)
	}
	root := strings.TrimSuffix(fc.arg(0), "/")
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
		if *depth > 1 {
			names[i] = relativeTo(e.Path, root)
		}
		if e.Type == client.FileTypeSymlink {
			names[i] += " -> " + e.SymlinkTarget
		}
	}
	if *long {
		writeLong(stdout, entries, names)
		return 0
	}
	for _, name := range names {
		fmt.Fprintln(stdout, name)
	}
	return 0
}

// writeLong prints entries as ls -l does: owner and group padded on the
// right, sizes on the left, so that every column lines up.
func writeLong(w io.Writer, entries []client.FileInfo, names []string) {
	var owner, group, size int
	for _, e := range entries {
		owner = max(owner, len(e.Owner))
		group = max(group, len(e.Group))
		size = max(size, len(strconv.FormatInt(e.Size, 10)))
	}
	for i, e := range entries {
		fmt.Fprintf(w, "%s %-*s %-*s %*d %s %s\n", e.Permissions, owner, e.Owner, group, e.Group, size, e.Size, e.ModTime.Format("2006-01-02 15:04"), names[i])
	}
}

// relativeTo shows p below root as the listing was asked for.
func relativeTo(p, root string) string {
	if rest, ok := strings.CutPrefix(p, root+"/"); ok && strings.HasPrefix(root, "/") {
		return rest
	}
	return p
}

// runStat is `rayito-agent stat`: print an entry's metadata as JSON.
func runStat(args []string, stdout, stderr io.Writer) int {
	fc := newFileCommand("stat", stdout, stderr)
	if code, ok := fc.parse(args, 1); !ok {
		return code
	}
	c, fsys, err := fc.files()
	if err != nil {
		return fc.fail(err)
	}
	defer c.Close()
	info, err := fsys.Stat(context.Background(), fc.arg(0))
	if err != nil {
		return fc.fail(err)
	}
	out := struct {
		client.FileInfo
		Mode    string `json:"mode"`
		ModTime string `json:"mtime"`
	}{info, fmt.Sprintf("%04o", info.Mode), info.ModTime.Format("2006-01-02T15:04:05.000Z07:00")}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(out)
	return 0
}

// runRm is `rayito-agent rm`: remove files (with -r, trees).
func runRm(args []string, stdout, stderr io.Writer) int {
	fc := newFileCommand("rm", stdout, stderr)
	recursive := fc.fs.Bool("r", false, "remove directories and their contents")
	if code, ok := fc.parse(args, 1); !ok {
		return code
	}
	c, fsys, err := fc.files()
	if err != nil {
		return fc.fail(err)
	}
	defer c.Close()
	code := 0
	for _, p := range fc.args() {
		if *recursive {
			err = fsys.RemoveAll(context.Background(), p)
		} else {
			err = fsys.Remove(context.Background(), p)
		}
		if err != nil {
			code = fc.fail(err)
		}
	}
	return code
}

// runMkdir is `rayito-agent mkdir`: create directories and their parents.
func runMkdir(args []string, stdout, stderr io.Writer) int {
	fc := newFileCommand("mkdir", stdout, stderr)
	if code, ok := fc.parse(args, 1); !ok {
		return code
	}
	c, fsys, err := fc.files()
	if err != nil {
		return fc.fail(err)
	}
	defer c.Close()
	code := 0
	for _, p := range fc.args() {
		if err := fsys.MkdirAll(context.Background(), p); err != nil {
			code = fc.fail(err)
		}
	}
	return code
}
