package main

import (
	"bufio"
	"context"
	"encoding/json"
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
	save := fs.String("save", "", "write rich outputs (images, HTML, JSON) to files in this directory, output-N.EXT, and name them")
	asJSON := fs.Bool("json", false, "print the cell's events as JSON lines (stdout, stderr, result, display, error, then end) instead of as text")
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
	out.save = *save
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
	var events *jsonEvents
	if *asJSON {
		events = &jsonEvents{enc: json.NewEncoder(stdout)}
		o.OnStdout = func(s string) { events.put(jsonEvent{Type: client.CellStdout, Text: s}) }
		o.OnStderr = func(s string) { events.put(jsonEvent{Type: client.CellStderr, Text: s}) }
		o.OnResult = func(r client.Output) { events.put(jsonEvent{Type: client.CellResult, Main: r.Main, Data: r.Data}) }
		o.OnDisplay = func(r client.Output) { events.put(jsonEvent{Type: client.CellDisplay, Data: r.Data}) }
		o.OnError = func(e client.ExecError) {
			events.put(jsonEvent{Type: client.CellError, Name: e.Name, Value: e.Value, Traceback: e.Traceback})
		}
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
	if events != nil {
		events.put(jsonEvent{Type: "end", Status: ex.Status, ExecutionCount: ex.ExecutionCount, Message: ex.Message})
	} else if ex.Message != "" {
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
	// save is where rich outputs are written ("": nowhere), saved how
	// many were (cmd_runcode_rich.go).
	save  string
	saved int
}

func cellPrinter(stdout, stderr io.Writer) *cellOutput {
	f, ok := stderr.(*os.File)
	return &cellOutput{stdout: stdout, stderr: stderr, colour: ok && isTerminal(int(f.Fd()))}
}

// output prints a result or display: its text, then a line saying what
// else it holds ("[image/png 640x480]"), which a terminal cannot show.
func (o *cellOutput) output(out client.Output) {
	if s := out.Text(); s != "" {
		fmt.Fprintln(o.stdout, s)
	}
	for _, note := range o.richNotes(out.Data) {
		fmt.Fprintln(o.stdout, note)
	}
}

func (o *cellOutput) error(e client.ExecError) {
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
func (o *cellOutput) event(ev client.CellEvent) {
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

// jsonEvent is one line of run-code --json.
type jsonEvent struct {
	Type           string         `json:"type"`
	Text           string         `json:"text,omitempty"`
	Main           bool           `json:"main,omitempty"`
	Data           map[string]any `json:"data,omitempty"`
	Name           string         `json:"name,omitempty"`
	Value          string         `json:"value,omitempty"`
	Traceback      []string       `json:"traceback,omitempty"`
	Status         string         `json:"status,omitempty"`
	ExecutionCount int            `json:"execution_count,omitempty"`
	Message        string         `json:"message,omitempty"`
}

// jsonEvents writes events as JSON lines; the callbacks run on goroutines
// of their own.
type jsonEvents struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (j *jsonEvents) put(ev jsonEvent) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.enc.Encode(ev)
}

// ansiEscape matches terminal escape sequences (colours, cursor moves).
// Compiled at first use: the agent that serves never needs it, and an
// expression compiled at start costs the idle agent's memory.
var ansiEscape = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")
})
