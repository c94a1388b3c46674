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
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/rayito/rayito-agent/client"
)

// runCode is `rayito-agent run-code 'CODE'` ('-' reads the code from
// stdin): run a cell on a kernel and print its outputs as they come,
// stdout and results to stdout, stderr and errors (with their traceback)
// to stderr. input() reads a line of our stdin. SIGINT interrupts the
// kernel. Exit code 0 if the cell's status is ok, 1 otherwise.
func runCode(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := commandFlags("run-code", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	kernel := fs.String("kernel", "", "kernel id (default: the default kernel, started on first use)")
	timeout := fs.Duration("timeout", 0, "interrupt the cell after this long in the kernel (e.g. 30s)")
	keepAwake := fs.Bool("keep-awake", false, "keep the sandbox awake while the cell runs, even if it prints nothing")
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

	out := cellPrinter(stdout, stderr)
	o := client.ExecuteOptions{
		Timeout:   *timeout,
		KeepAwake: *keepAwake,
		OnStdout:  func(s string) { io.WriteString(stdout, s) },
		OnStderr:  func(s string) { io.WriteString(stderr, s) },
		OnResult:  out.output,
		OnDisplay: out.output,
		OnError:   out.error,
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

// cellOutput prints a cell's outputs as run-code shows them: stdout and
// the text of results and displays to stdout, stderr and errors (with
// their traceback) to stderr.
type cellOutput struct {
	stdout, stderr io.Writer
	// colour keeps the traceback's ANSI colours: only for a terminal,
	// where they mean something; in a file or a pipe they are noise.
	colour bool
}

func cellPrinter(stdout, stderr io.Writer) cellOutput {
	f, ok := stderr.(*os.File)
	return cellOutput{stdout: stdout, stderr: stderr, colour: ok && isTerminal(int(f.Fd()))}
}

func (o cellOutput) output(out client.Output) {
	if s := out.Text(); s != "" {
		fmt.Fprintln(o.stdout, s)
	}
}

func (o cellOutput) error(e client.ExecError) {
	if len(e.Traceback) == 0 {
		fmt.Fprintln(o.stderr, e.Error())
	}
	for _, line := range e.Traceback {
		if !o.colour {
			line = ansiEscape().ReplaceAllString(line, "")
		}
		fmt.Fprintln(o.stderr, line)
	}
}

// event prints one event of a cell read with Next.
func (o cellOutput) event(ev client.CellEvent) {
	switch ev.Type {
	case client.CellStdout:
		io.WriteString(o.stdout, ev.Text)
	case client.CellStderr:
		io.WriteString(o.stderr, ev.Text)
	case client.CellResult, client.CellDisplay:
		o.output(client.Output{Main: ev.Main, Data: ev.Data})
	case client.CellError:
		o.error(client.ExecError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback})
	}
}

// ansiEscape matches terminal escape sequences (colours, cursor moves).
// Compiled at first use: the agent that serves never needs it, and an
// expression compiled at start costs the idle agent's memory.
var ansiEscape = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")
})
