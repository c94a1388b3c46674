package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rayito/rayito-agent/client"
)

func execCmd(args []string) int {
	return runExec(args, os.Stdin, os.Stdout, os.Stderr)
}

func healthCmd(args []string) int {
	return runHealth(args, os.Stdout, os.Stderr)
}

func ptyCmd(args []string) int {
	return runPTY(args, os.Stdin, os.Stdout, os.Stderr)
}

// watchCmd runs until SIGINT or SIGTERM.
func watchCmd(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runWatch(ctx, args, os.Stdout, os.Stderr)
}

func runCodeCmd(args []string) int {
	return runCode(args, os.Stdin, os.Stdout, os.Stderr)
}

func resumeCmd(args []string) int {
	return runResume(args, os.Stdout, os.Stderr)
}

// dialAgent connects to the agent at url with the token from
// RAYITO_ACCESS_TOKEN.
func dialAgent(url string) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Dial(ctx, url, client.Options{Token: os.Getenv("RAYITO_ACCESS_TOKEN")})
}
