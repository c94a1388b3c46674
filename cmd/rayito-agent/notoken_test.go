package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A bare agent on an address other machines reach, with no token, says
// so loudly before it serves; on loopback, or with a token, it does not.
func TestNoTokenOnAnOpenAddressWarns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen, token string
		warn          bool
	}{
		{"0.0.0.0:0", "", true},
		{"127.0.0.1:0", "", false},
		{"0.0.0.0:0", "a-token", false},
	} {
		cmd := exec.Command(agentBinary(t), "serve", "--listen", tc.listen, "--state-dir", t.TempDir(), "--set-clock=false")
		cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN="+tc.token)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		warned, served := false, make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				warned = warned || strings.Contains(sc.Text(), "NO ACCESS TOKEN")
				if strings.Contains(sc.Text(), `"msg":"serving"`) {
					served <- warned
					break
				}
			}
			close(served)
		}()
		select {
		case got := <-served:
			if got != tc.warn {
				t.Errorf("--listen %s, token %q: warned %v, want %v", tc.listen, tc.token, got, tc.warn)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("--listen %s: the agent did not serve", tc.listen)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}
