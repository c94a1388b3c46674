package main

import (
	"context"
	"errors"
	"fmt"
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

func pauseCmd(args []string) int {
	return runPause(args, os.Stdout, os.Stderr)
}

func resumeCmd(args []string) int {
	return runResume(args, os.Stdout, os.Stderr)
}

func upgradeCmd(args []string) int {
	return runUpgrade(args, os.Stdout, os.Stderr)
}

func runawayCmd(args []string) int {
	return runRunaway(args, os.Stdout, os.Stderr)
}

// dialAgent connects to the agent at url with the token from
// RAYITO_ACCESS_TOKEN.
func dialAgent(url string) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, client.Options{Token: os.Getenv("RAYITO_ACCESS_TOKEN"), OnSuspend: func(gen uint64) {
		// attach, watch and the rest wait for the sandbox, however long.
		fmt.Fprintf(os.Stderr, "rayito-agent: the sandbox is being paused (generation %d); waiting for it to run again\n", gen)
	}})
	return c, explainToken(err)
}

// host is the Host for the host calls (init, resume) with the token from
// RAYITO_ACCESS_TOKEN.
func host(url string) client.Host {
	return client.Host{URL: url, Token: os.Getenv("RAYITO_ACCESS_TOKEN")}
}

// explainToken says, for a refused token, where the command took it from
// and what to do.
func explainToken(err error) error {
	if !errors.Is(err, client.ErrUnauthorized) {
		return err
	}
	if os.Getenv("RAYITO_ACCESS_TOKEN") == "" {
		return fmt.Errorf("%w\nRAYITO_ACCESS_TOKEN is not set: export the agent's token (make run prints it; rayito-agent init sets one on an agent that has none)", err)
	}
	return fmt.Errorf("%w\nthe agent refused the token in RAYITO_ACCESS_TOKEN: export the token it was started with (make run prints it and keeps it in build/state/dev-token)", err)
}
