// Command rayito-agent is the in-guest agent of a MicroVM sandbox: one
// websocket endpoint for commands, PTYs, watches and Jupyter kernels. With
// no subcommand (or `serve`) it runs the agent; the other subcommands are
// small clients for people and scripts.
package main

import (
	"fmt"
	"os"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var code int
	switch cmd {
	case "serve":
		code = serve(args)
	case "exec":
		code = execCmd(args)
	case "pty":
		code = ptyCmd(args)
	case "watch":
		code = watchCmd(args)
	case "run-code":
		code = runCodeCmd(args)
	case "health":
		code = healthCmd(args)
	case "resume":
		code = resumeCmd(args)
	case "cp":
		code = cpCmd(args)
	case "ls":
		code = lsCmd(args)
	case "stat":
		code = statCmd(args)
	case "rm":
		code = rmCmd(args)
	case "mkdir":
		code = mkdirCmd(args)
	case "version":
		fmt.Println(version)
	case "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "rayito-agent: unknown command %q\n", cmd)
		usage()
		code = 2
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  rayito-agent [serve] [flags]     run the agent (see rayito-agent serve -h)
  rayito-agent exec [flags] -- CMD...   run a command, stream its output, exit with its code
  rayito-agent pty [--user U] [--cwd D] [-- CMD...]   an interactive terminal (default: the login shell)
  rayito-agent watch [flags] PATH [-r]  print a directory's changes as JSON lines until interrupted
  rayito-agent run-code [--kernel ID] [--timeout D] CODE   run Python on a kernel (CODE - reads stdin)
  rayito-agent health [flags]      print the agent's /health
  rayito-agent resume [--id ID] [--time-now]   tell the agent its VM was resumed, print its answer
  rayito-agent cp [--user U] LOCAL :REMOTE | :REMOTE LOCAL   copy files or directories in or out ("-": stdin/stdout)
  rayito-agent ls [-l] [--depth N] PATH | stat PATH | rm [-r] PATH... | mkdir PATH...   files in the sandbox
  rayito-agent version             print the version
Client commands take --url (default ws://127.0.0.1:49983) and read the token from RAYITO_ACCESS_TOKEN.
`)
}
