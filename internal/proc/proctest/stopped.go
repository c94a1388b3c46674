// Package proctest holds what tests of several packages need to know
// about processes. Only tests import it.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Stopped tells whether every thread of pid is stopped. A stop signal is
// delivered to each thread when it next runs, so a test that stops a
// process must wait for this before it relies on the process not
// answering.
func Stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		st := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(st) == 0 || (st[0] != "T" && st[0] != "t") {
			return false
		}
	}
	return true
}
