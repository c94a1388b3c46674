package main

import (
	"os"
	"testing"
)

// TestMain removes the agent binary the benchmarks built.
func TestMain(m *testing.M) {
	code := m.Run()
	if agentBuild.dir != "" {
		os.RemoveAll(agentBuild.dir)
	}
	os.Exit(code)
}
