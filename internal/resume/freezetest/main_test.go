package freezetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// agentBin is the agent binary built once for the package by TestMain.
var agentBin string

// TestMain builds the static agent binary the tests run. The test process
// is no subreaper and starts no proc.Reaper: the agent is its only child,
// waited for with exec.Cmd.Wait, and reaps its own descendants.
//
// RAYITO_FREEZETEST_AGENT names a prebuilt binary to use instead, to
// compare builds of the agent with the same tests and benchmark.
func TestMain(m *testing.M) {
	if bin := os.Getenv("RAYITO_FREEZETEST_AGENT"); bin != "" {
		agentBin = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "freezetest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "rayito-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/rayito/rayito-agent/cmd/rayito-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the agent: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
