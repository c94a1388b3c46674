package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rayito/rayito-agent/client"
)

// runCode is `rayito-agent run-code 'CODE'` ('-' reads the code from
// stdin): run a cell on a kernel and print its outputs as they come,
// stdout and results to stdout, stderr and errors (with their traceback)
// to stderr. input() reads a line of our stdin. SIGINT interrupts the
// kernel. Exit code 0 if the cell's status is ok, 1 otherwise.
func runCode(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run-code", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	kernel := fs.String("kernel", "", "kernel id (default: the default kernel, started on first use)")
	timeout := fs.Duration("timeout", 0, "interrupt the cell after this long in the kernel (e.g. 30s)")
	keepAwake := fs.Bool("keep-awake", false, "keep the sandbox awake while the cell runs, even if it prints nothing")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rayito-agent run-code [flags] CODE   (CODE - reads it from stdin)")
		fs.PrintDefaults()
	}
	code, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(code) != 1 {
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "rayito-agent run-code:", err)
		return 1
	}
	src := code[0]
	input := bufio.NewReader(stdin)
	if src == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fail(err)
		}
		src, input = string(b), bufio.NewReader(strings.NewReader(""))
	}
	c, err := dialAgent(*url)
	if err != nil {
		return fail(err)
	}
	defer c.Close()

	printText := func(o client.Output) {
		if s := o.Text(); s != "" {
			fmt.Fprintln(stdout, s)
		}
	}
	o := client.ExecuteOptions{
		Timeout:   *timeout,
		KeepAwake: *keepAwake,
		OnStdout:  func(s string) { io.WriteString(stdout, s) },
		OnStderr:  func(s string) { io.WriteString(stderr, s) },
		OnResult:  printText,
		OnDisplay: printText,
		OnError: func(e client.ExecError) {
			if len(e.Traceback) == 0 {
				fmt.Fprintln(stderr, e.Error())
			}
			for _, line := range e.Traceback {
				fmt.Fprintln(stderr, line)
			}
		},
		OnInput: func(prompt string, password bool) (string, error) {
			io.WriteString(stderr, prompt)
			line, err := input.ReadString('\n')
			if err != nil && line == "" {
				return "", fmt.Errorf("no input for %q: %w", prompt, err)
			}
			return strings.TrimRight(line, "\r\n"), nil
		},
	}
	k := c.DefaultKernel()
	if *kernel != "" {
		k = c.Kernel(*kernel)
	}
	ctx := context.Background()
	cell, err := k.Run(ctx, src, o)
	if err != nil {
		return fail(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case <-sigs:
				callSoon(func(ctx context.Context) error { return c.Kernel(cell.Kernel()).Interrupt(ctx) })
			case <-cell.Done():
				return
			}
		}
	}()
	ex, err := cell.Wait(ctx)
	if err != nil {
		return fail(err)
	}
	if ex.Message != "" {
		fmt.Fprintln(stderr, "rayito-agent run-code:", ex.Message)
	}
	if ex.Status != client.StatusOK {
		return 1
	}
	return 0
}
