package envdapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/rayito/rayito-agent/internal/nodetest"
)

// nodeDir holds the Node test and its pinned packages (make node-deps).
const nodeDir = "nodetest"

// needNode skips without node or the pinned packages, unless the run must
// include Node tests (RAYITO_NODE_TESTS=1, as make sets it): then it fails.
func needNode(t testing.TB) {
	t.Helper()
	nodetest.Require(t, nodeDir, "e2b")
}

// fakeAPI answers what the e2b SDK asks of E2B's API to create a sandbox,
// handing out the agent's token, so the SDK sends it; /test/stdout lets
// the Node test read a command's stdout cursor in the open agent.
func fakeAPI(t *testing.T, open *agent) *httptest.Server {
	sandbox := map[string]any{
		"sandboxID": "rayito-test", "templateID": "base", "clientID": "test", "envdVersion": "0.6.13",
		"envdAccessToken": nativeToken, "trafficAccessToken": nil, "domain": nil,
	}
	mux := http.NewServeMux()
	reply := func(status int, v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			if v != nil {
				json.NewEncoder(w).Encode(v)
			}
		}
	}
	mux.HandleFunc("POST /v2/sandboxes", reply(http.StatusCreated, sandbox))
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", reply(http.StatusOK, sandbox))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", reply(http.StatusNoContent, nil))
	mux.HandleFunc("DELETE /sandboxes/{id}", reply(http.StatusNoContent, nil))
	mux.HandleFunc("GET /test/stdout", func(w http.ResponseWriter, r *http.Request) {
		pid, _ := strconv.Atoi(r.URL.Query().Get("pid"))
		var cursor uint64
		if st := open.streams.Find(pid, ""); st != nil {
			cursor = st.Cursors()["stdout"]
		}
		reply(http.StatusOK, map[string]uint64{"cursor": cursor})(w, r)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// TestSDK drives the agent with the real e2b SDK (2.51.0): every case is
// in nodetest/envd.test.mjs.
func TestSDK(t *testing.T) {
	needNode(t)
	open := newAgent(t, agentOptions{open: true})
	secured := newAgent(t, agentOptions{})
	api := fakeAPI(t, open)
	out := nodetest.Run(t, testReaper(t), nodeDir, "--test", []string{
		"RAYITO_OPEN_URL=" + open.url, "RAYITO_SECURED_URL=" + secured.url, "RAYITO_API_URL=" + api.URL,
		"RAYITO_TOKEN=" + nativeToken, "RAYITO_TMP=" + t.TempDir(),
		"E2B_DEBUG=", "E2B_API_KEY=", "E2B_ACCESS_TOKEN=", "E2B_SANDBOX_URL=", "E2B_DOMAIN=",
	}, "--test-reporter=spec", "envd.test.mjs")
	t.Logf("%s", out)
}

// TestSDKLocalPath: an unchanged program, configured only by the three
// environment variables make run prints, runs Sandbox.create() and what
// follows against an agent with --e2b-api (nodetest/local.mjs).
func TestSDKLocalPath(t *testing.T) {
	needNode(t)
	a := newAgent(t, agentOptions{e2bAPI: true})
	out := nodetest.Run(t, testReaper(t), nodeDir, "local.mjs", []string{
		"E2B_API_URL=" + a.url, "E2B_SANDBOX_URL=" + a.url, "E2B_API_KEY=" + nativeToken,
		"E2B_DEBUG=", "E2B_ACCESS_TOKEN=", "E2B_DOMAIN=",
	})
	t.Logf("%s", out)
}
