package jupyterapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/nodetest"
)

// TestJupyterLabServices drives the API with the real @jupyterlab/services
// client (nodetest/jupyter_test.js): once with the v1 websocket framing,
// and once with an agent that selects no subprotocol, so that the client
// falls back to the legacy JSON framing after one failed handshake. The
// resume case prints "cut for resume" when its kernel is connected, and
// the agent then cuts its websockets as a resume does.
func TestJupyterLabServices(t *testing.T) {
	nodetest.Require(t, "nodetest", "@jupyterlab/services")
	for _, tc := range []struct {
		protocol string
		legacy   bool
		cases    []string
	}{
		{"v1", false, []string{"specs", "kernel", "session", "resume", "inputResume"}},
		{"legacy", true, []string{"kernel", "session", "resume", "inputResume"}},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			a := newAgent(t, tc.legacy)
			env := []string{"RAYITO_URL=" + a.url, "RAYITO_TOKEN=" + testToken, "RAYITO_PROTOCOL=" + tc.protocol}
			for _, c := range tc.cases {
				t.Run(c, func(t *testing.T) {
					cuts := 0
					onLine := func(line string) {
						if line != "cut for resume" {
							return
						}
						cuts++
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						a.resume(ctx)
					}
					nodetest.RunWatching(t, reaper, "nodetest", "jupyter_test.js", env, onLine, c)
					if want := map[bool]int{true: 1}[c == "resume" || c == "inputResume"]; cuts != want {
						t.Fatalf("the script asked for %d cuts, want %d", cuts, want)
					}
				})
			}
			if ks := a.kernels.List(); len(ks) != 0 {
				t.Fatalf("kernels left behind: %+v", ks)
			}
		})
	}
}
