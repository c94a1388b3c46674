// Command rayito-agent is the in-guest agent of a MicroVM sandbox: one
// websocket endpoint for commands, PTYs, watches and Jupyter kernels. With
// no subcommand (or `serve`) it runs the agent; the other subcommands are
// small clients for people and scripts (commands.go lists them).
package main

import "os"

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() { os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr)) }
