package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/client"
)

// eot is Ctrl-D: what ends the input of a program that reads lines from a
// terminal, sent when our own stdin (not a terminal) ends.
const eot = 0x04

// runPTY is `rayito-agent pty`: an interactive terminal in the sandbox.
// With stdin a terminal it is put in raw mode (restored on every way out)
// so keystrokes go through as typed, and window size changes follow;
// otherwise stdin's bytes are forwarded as they are. It exits with the
// remote program's exit code.
func runPTY(args []string, stdin, stdout *os.File, stderr io.Writer) int {
	fs := commandFlags("pty", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	user := fs.String("user", "", "user to run the program as")
	cwd := fs.String("cwd", "", "working directory of the program")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "rayito-agent pty:", err)
		return exitClientError
	}
	c, err := dialAgent(*url)
	if err != nil {
		return fail(err)
	}
	defer c.Close()

	in, sizeFd := int(stdin.Fd()), int(stdout.Fd())
	interactive := isTerminal(in)
	if !isTerminal(sizeFd) {
		sizeFd = in
	}
	o := client.PTYOptions{Argv: fs.Args(), User: *user, Cwd: *cwd, OnOutput: func(b []byte) { stdout.Write(b) }}
	o.Cols, o.Rows, _ = termSize(sizeFd)
	if term := os.Getenv("TERM"); term != "" && interactive {
		o.Env = map[string]string{"TERM": term}
	}
	// Signals are caught before the terminal goes raw, so none can leave
	// it raw behind us.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGWINCH, unix.SIGTERM, unix.SIGHUP, unix.SIGINT, unix.SIGQUIT)
	defer signal.Stop(sigs)
	ctx := context.Background()
	p, err := c.PTY(ctx, o)
	if err != nil {
		return fail(err)
	}
	if interactive {
		restore, err := makeRaw(in)
		if err != nil {
			p.SignalProgram(ctx, client.SIGHUP)
			return fail(fmt.Errorf("raw mode: %w", err))
		}
		defer restore()
	}
	inputDone := make(chan error, 1)
	go func() { inputDone <- forwardInput(stdin, p, interactive) }()

	for {
		select {
		case <-p.Done():
			st, err := p.Wait(ctx)
			if err != nil {
				return fail(err)
			}
			return st.ExitCode()
		case s := <-sigs:
			switch s {
			case unix.SIGWINCH:
				if cols, rows, ok := termSize(sizeFd); ok {
					callSoon(func(ctx context.Context) error { return p.Resize(ctx, cols, rows) })
				}
			case unix.SIGINT, unix.SIGQUIT:
				// Only when stdin is not a raw terminal (there Ctrl-C is
				// a keystroke): the job in the foreground gets it.
				sig := client.SIGINT
				if s == unix.SIGQUIT {
					sig = client.SIGQUIT
				}
				callSoon(func(ctx context.Context) error { return p.Signal(ctx, sig) })
			default:
				// Our terminal went away or we are told to stop: hang the
				// remote one up too, as a closed terminal window does.
				callSoon(func(ctx context.Context) error { return p.SignalProgram(ctx, client.SIGHUP) })
				return 128 + int(s.(syscall.Signal))
			}
		case err := <-inputDone:
			inputDone = nil
			if interactive || err != nil {
				// The local terminal is gone: so is the remote one.
				callSoon(func(ctx context.Context) error { return p.SignalProgram(ctx, client.SIGHUP) })
			}
		}
	}
}

// forwardInput copies stdin to the terminal. Piped input ends with a
// Ctrl-D, the end of input a line-reading program understands, sent again
// every eotEvery while the program runs: a Ctrl-D that arrives before the
// program reads (a shell still starting) is a zero-length line in the
// terminal's canonical mode, which vanishes when the program switches the
// terminal to raw mode, as readline does; and a stdin that has ended
// reads as ended every time.
func forwardInput(stdin io.Reader, p *client.PTY, interactive bool) error {
	if _, err := io.Copy(p, stdin); err != nil {
		return err
	}
	if interactive {
		return nil
	}
	for {
		if _, err := p.Write([]byte{eot}); err != nil {
			return err
		}
		select {
		case <-p.Done():
			return nil
		case <-time.After(eotEvery):
		}
	}
}

// eotEvery paces the Ctrl-Ds of piped input that has ended.
const eotEvery = time.Second

// callSoon makes a call to the agent with a bound, ignoring its error: a
// resize or signal that fails because the program just ended is moot.
func callSoon(fn func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fn(ctx)
}

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// termSize returns a terminal's size; ok false (and zeros, the agent's
// default) if fd is not a terminal.
func termSize(fd int) (cols, rows int, ok bool) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return 0, 0, false
	}
	return int(ws.Col), int(ws.Row), true
}

// makeRaw puts the terminal fd in raw mode, as cfmakeraw(3) does: no
// echo, no line editing, no signals from keys, no output processing. The
// returned function restores the previous mode; it may be called more
// than once.
func makeRaw(fd int) (restore func() error, err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = unix.IoctlSetTermios(fd, unix.TCSETS, old) })
		return err
	}, nil
}
