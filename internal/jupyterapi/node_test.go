package jupyterapi_test

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/nodetest"
)

// TestJupyterLabServices drives the API with the real @jupyterlab/services
// client (nodetest/jupyter_test.js): once with the v1 websocket framing,
// and once with an agent that selects no subprotocol, so that the client
// falls back to the legacy JSON framing after one failed handshake.
func TestJupyterLabServices(t *testing.T) {
	nodetest.Require(t, "nodetest", "@jupyterlab/services")
	for _, tc := range []struct {
		protocol string
		legacy   bool
		cases    []string
	}{
		{"v1", false, []string{"specs", "kernel", "session"}},
		{"legacy", true, []string{"kernel", "session"}},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			a := newAgent(t, tc.legacy)
			env := []string{"RAYITO_URL=" + a.url, "RAYITO_TOKEN=" + testToken, "RAYITO_PROTOCOL=" + tc.protocol}
			for _, c := range tc.cases {
				t.Run(c, func(t *testing.T) {
					nodetest.Run(t, "nodetest", "jupyter_test.js", env, c)
				})
			}
			if ks := a.kernels.List(); len(ks) != 0 {
				t.Fatalf("kernels left behind: %+v", ks)
			}
		})
	}
}
