package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// command is one subcommand of rayito-agent.
type command struct {
	name    string
	args    string // what follows the name in its usage line
	summary string // one line for the listing
	run     func(args []string) int
	// notes, when set, follow the summary in the command's -h: what a
	// user must know beyond its flags (what Ctrl-C does, say).
	notes string
}

// Notes of the commands that follow a stream: what Ctrl-C and a closed
// terminal do to each.
const (
	execNotes = `Ctrl-C, SIGTERM and a closed terminal (SIGHUP) are sent on to the command's
process group, as for a local command: the command decides whether it ends,
and exec exits with its exit code once it has. The agent keeps the command's
output: if exec itself dies (killed, the connection lost), the command runs on
and "rayito-agent attach --tag TAG" (or STREAM, or --pid) finds it again.
With --detach, exec starts the command, prints its stream and pid (and tag),
and returns at once; the command runs on, its output kept for attach.`
	runawayNotes = `It measures the idle agent, then starts, through the native protocol and at the
default priority, a Python memory hog (a 16 MiB bytearray every 10 ms), the
shell's fork bomb (killed after 60 s) and eight busy loops, and for --for probes
/health (5 s bound, as a host's check) and "exec echo ok" (10 s bound). It
prints /health and exec p50/p99 idle and under the load, how the hog ended,
and how soon the agent answered once the load was killed; it exits 1 if
/health's p99 passed max(5 x idle p99, 100 ms) or 1 s, a probe failed, the
hog was not oom_killed within 60 s, or the agent took over 1 s to answer
after. The load is real: it refuses an agent whose user work has no cgroup of
its own (/health's isolation is not "on"), as on a laptop; use a sandbox VM.`
	attachNotes = `Ctrl-C or SIGTERM detaches and leaves the stream running (exit code 130);
it sends the command nothing. A closed terminal ends attach the same way.
To stop a command, signal it inside the sandbox or from the exec that
started it.`
)

// commands lists the subcommands, in the order `rayito-agent -h` shows
// them: adding one is one line here. (A function, not a variable: the
// commands' own usage reads this table.)
func commands() []command {
	return []command{
		{"serve", "[flags]", "run the agent (also with no subcommand)", serve, ""},
		{"exec", "[flags] -- CMD [ARG...]", "run a command, stream its output, exit with its exit code", execCmd, execNotes},
		{"attach", "[flags] STREAM | --pid PID | --tag TAG", "follow a stream again: replay its output from a cursor, then live", attachCmd, attachNotes},
		{"pty", "[flags] [-- CMD [ARG...]]", "an interactive terminal (default: the user's login shell)", ptyCmd, ""},
		{"watch", "[flags] PATH", "print a directory's changes as JSON lines until interrupted", watchCmd, ""},
		{"run-code", "[flags] CODE", "run Python on a kernel (CODE - reads it from stdin)", runCodeCmd, ""},
		{"cp", "[flags] LOCAL :REMOTE | :REMOTE LOCAL", "copy files or directories into or out of the sandbox (\"-\" is stdin or stdout)", cpCmd, ""},
		{"ls", "[flags] [:]PATH", "list a directory of the sandbox", lsCmd, ""},
		{"stat", "[flags] [:]PATH", "describe a file of the sandbox", statCmd, ""},
		{"rm", "[flags] [:]PATH...", "remove files of the sandbox (-r: directories too)", rmCmd, ""},
		{"mkdir", "[flags] [:]PATH...", "make directories in the sandbox, with their parents", mkdirCmd, ""},
		{"health", "[flags]", "print the agent's /health", healthCmd, ""},
		{"init", "[flags]", "configure the agent as a host does (POST /v1/init)", initCmd, ""},
		{"pause", "[flags]", "tell the agent its VM is about to be paused, or with --abort that it is not (POST /v1/pause)", pauseCmd, ""},
		{"resume", "[flags]", "tell the agent its VM was resumed (POST /v1/resume)", resumeCmd, ""},
		{"upgrade", "[flags]", "hand the sandbox to a new agent binary, keeping what it runs (POST /v1/upgrade)", upgradeCmd, ""},
		{"runaway", "[flags]", "run a memory hog, a fork bomb and busy loops in the sandbox and see the agent keep answering", runawayCmd, runawayNotes},
		{"version", "", "print the version", versionCmd, ""},
		{"handover-check", "", "print the version and the handover formats this binary reads, as JSON (an upgrading agent asks)", handoverCheckCmd, ""},
	}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// dispatch runs the subcommand args name; no subcommand, or flags first,
// is serve.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return serve(nil)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) > 1 {
			if c, ok := findCommand(args[1]); ok {
				return c.run([]string{"-h"})
			}
		}
		usage(stdout)
		return 0
	case "-version", "--version":
		return versionCmd(nil)
	}
	if strings.HasPrefix(args[0], "-") {
		return serve(args)
	}
	c, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "rayito-agent: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:])
}

// usage lists the subcommands.
func usage(w io.Writer) {
	fmt.Fprint(w, "rayito-agent is the in-guest agent of a sandbox VM, and small clients for it.\n\nusage: rayito-agent [COMMAND] [flags]\n\ncommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
With no command, or flags first, it serves (rayito-agent serve -h for its flags).
Client commands take --url (default RAYITO_URL, else ws://127.0.0.1:49983)
and read the token from RAYITO_ACCESS_TOKEN. rayito-agent COMMAND -h describes each.
`)
}

// commandFlags is the flag set of a subcommand, with the usage every
// subcommand shares: its line, its summary, its flags.
func commandFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c, _ := findCommand(name)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\n%s.\n", strings.TrimSpace("usage: rayito-agent "+c.name+" "+c.args), upperFirst(c.summary))
		if c.notes != "" {
			fmt.Fprintf(stderr, "\n%s\n", c.notes)
		}
		if hasFlags(fs) {
			fmt.Fprint(stderr, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func versionCmd(args []string) int {
	fs := commandFlags("version", os.Stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fmt.Println(version)
	return 0
}

// parseFlags parses a subcommand's flags; done says the command should
// return code at once (-h: 0; a bad flag: 2, the flag package printed why).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}
