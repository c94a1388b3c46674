package proctest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/rayito/rayito-agent/internal/proc"
)

// Run runs a short command to its end through r, the test process's
// reaper, and returns its pid. A reaper reaps every child of the process,
// so os/exec's Wait could find its command already gone ("waitid: no
// child processes"); in a test process that runs a reaper, every child
// must be started through it. A non-zero exit is an error that carries
// what the command printed.
func Run(r *proc.Reaper, argv ...string) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 0, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	rd, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{null.Fd(), w.Fd(), w.Fd()}}
	pid, status, err := r.ForkExec(path, argv, attr)
	w.Close()
	if err != nil {
		return 0, err
	}
	out, _ := io.ReadAll(rd)
	if st := <-status; st.ExitCode() != 0 {
		return pid, fmt.Errorf("%v: %v, exit %d\n%s", argv, st.Wait, st.ExitCode(), out)
	}
	return pid, nil
}
