package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"
)

// The floor: the least a websocket agent written in Go has to do to run a
// command for a client the way the agent does, and nothing else; what the
// benchmarks measure the agent against besides a bare os/exec or pipe. A
// separate process (this test binary, run again as TestFloorServer)
// serves one websocket, a request per message:
//
//   - an exec (BenchmarkAgentExec): fork /bin/true with stdout and stderr
//     on pipes read in Go's poller, watch the child's pidfd in the poller,
//     answer "started" with the pid, reap, wait for both pipes' EOF and
//     answer the exit code; SIGCHLD is notified, as a subreaper's must be;
//   - an output (BenchmarkAgentOutput): run outputArgv with stdout on a
//     pipe read in the poller, each read (up to the agent's 256 KiB) sent
//     as a binary message, then "end".
//
// No streams, no JSON requests, no retention, no acknowledgements, no
// flow control. So `bare/floor` is what the agent's own design costs, and
// `floor/osexec` or `floor/pipe` what any such agent costs on the machine.

// floorEnv, set, makes TestFloorServer serve.
const floorEnv = "RAYITO_FLOOR"

func TestFloorServer(t *testing.T) {
	if os.Getenv(floorEnv) == "" {
		t.Skip("helper process for the benchmarks' floor")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(ln.Addr())
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ctx := context.Background()
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if string(msg) == "output" {
				if err := floorOutput(ctx, c); err != nil {
					c.Write(ctx, websocket.MessageText, []byte(`{"error":`+strconv.Quote(err.Error())+`}`))
				}
				continue
			}
			code, err := floorExec(ctx, c)
			if err != nil {
				c.Write(ctx, websocket.MessageText, []byte(`{"error":`+strconv.Quote(err.Error())+`}`))
				continue
			}
			c.Write(ctx, websocket.MessageText, []byte(`{"exit":`+strconv.Itoa(code)+`}`))
		}
	}))
}

// floorExec runs /bin/true as the floor does and returns its exit code.
// Its stdin is /dev/null, opened for each exec as the agent's is.
func floorExec(ctx context.Context, c *websocket.Conn) (int, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	files := []uintptr{null.Fd(), 0, 0}
	var outs []*os.File
	for i := 1; i <= 2; i++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return 0, err
		}
		outs = append(outs, os.NewFile(uintptr(p[0]), "out"))
		files[i] = uintptr(p[1])
	}
	pidfd := -1
	attr := &syscall.ProcAttr{Files: files, Sys: &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd}}
	pid, err := syscall.ForkExec("/bin/true", []string{"/bin/true"}, attr)
	unix.Close(int(files[1]))
	unix.Close(int(files[2]))
	if err != nil {
		for _, f := range outs {
			f.Close()
		}
		return 0, err
	}
	eof := make(chan struct{}, len(outs))
	for _, f := range outs {
		go func() {
			defer f.Close()
			b := make([]byte, 4096)
			for {
				if _, err := f.Read(b); err != nil {
					eof <- struct{}{}
					return
				}
			}
		}()
	}
	c.Write(ctx, websocket.MessageText, []byte(`{"started":`+strconv.Itoa(pid)+`}`))
	unix.SetNonblock(pidfd, true)
	pf := os.NewFile(uintptr(pidfd), "pidfd")
	defer pf.Close()
	rc, err := pf.SyscallConn()
	if err != nil {
		return 0, err
	}
	rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(p, 0)
		return n > 0
	})
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		return 0, err
	}
	for range outs {
		<-eof
	}
	return ws.ExitStatus(), nil
}

// floorOutput runs outputArgv and sends its stdout as the floor does.
func floorOutput(ctx context.Context, c *websocket.Conn) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.Command(outputArgv[0], outputArgv[1:]...)
	cmd.Stdout = pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for {
		n, err := pr.Read(buf)
		if n > 0 {
			if err := c.Write(ctx, websocket.MessageBinary, buf[:n]); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, []byte("end"))
}

// floor is a client of a floor server, started for one benchmark.
type floor struct {
	ws   *websocket.Conn
	ctx  context.Context
	proc *agentProc // the server, for its CPU and context switches
}

func startFloor(tb testing.TB) *floor {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloorServer$")
	cmd.Env = append(os.Environ(), floorEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatal("floor server:", err)
	}
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws://"+strings.TrimSpace(addr), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.CloseNow() })
	ws.SetReadLimit(1 << 20)
	return &floor{ws: ws, ctx: ctx, proc: &agentProc{pid: cmd.Process.Pid}}
}

// execTrue runs /bin/true through the floor server: a request, the
// started answer, the exit.
func (f *floor) execTrue(tb testing.TB) {
	if err := f.ws.Write(f.ctx, websocket.MessageText, []byte(`{"argv":["/bin/true"]}`)); err != nil {
		tb.Fatal(err)
	}
	for _, want := range []string{`{"started":`, `{"exit":0}`} {
		_, msg, err := f.ws.Read(f.ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if !strings.HasPrefix(string(msg), want) {
			tb.Fatalf("floor server answered %s, want %s", msg, want)
		}
	}
}

// readOutput has the floor server run outputArgv and reads its stdout to
// the end into buf, as the bare client reads the agent's frames; it
// returns the bytes.
func (f *floor) readOutput(tb testing.TB, buf []byte) int {
	if err := f.ws.Write(f.ctx, websocket.MessageText, []byte("output")); err != nil {
		tb.Fatal(err)
	}
	total := 0
	for {
		typ, r, err := f.ws.Reader(f.ctx)
		if err != nil {
			tb.Fatal(err)
		}
		n, err := io.ReadFull(r, buf)
		if err != io.ErrUnexpectedEOF && err != io.EOF {
			tb.Fatalf("floor message of %d bytes: %v", n, err)
		}
		if typ == websocket.MessageText {
			if string(buf[:n]) != "end" {
				tb.Fatalf("floor server answered %q", buf[:n])
			}
			return total
		}
		total += n
	}
}
