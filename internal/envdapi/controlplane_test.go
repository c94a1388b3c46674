package envdapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The control plane (--e2b-api) answers the SDK's calls for this one
// sandbox with the agent's token as the API key: create hands back the
// token and applies its envs to later commands; a wrong key is 401, an
// unknown sandbox 404, bad envs 400 and nothing applied.
func TestControlPlane(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{e2bAPI: true})
	call := func(method, path, key, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, a.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(raw, &m)
		return resp.StatusCode, m
	}
	status, sbx := call("POST", "/v2/sandboxes", nativeToken, `{"templateID":"base","envVars":{"FROM_CREATE":"yes"}}`)
	if status != 201 || sbx["sandboxID"] != "local" || sbx["envdAccessToken"] != nativeToken || sbx["envdVersion"] == "" {
		t.Fatalf("create: %d %v", status, sbx)
	}
	s, pid := started(t, a, startReq("echo $FROM_CREATE"))
	if r := finish(s, pid); string(r.stdout) != "yes\n" {
		t.Fatalf("a command after a create with envs: %q", r.stdout)
	}
	for _, c := range []struct {
		method, path, key, body string
		status                  int
	}{
		{"POST", "/v2/sandboxes/local/connect", nativeToken, `{}`, 201},
		{"GET", "/sandboxes/local", nativeToken, ``, 200},
		{"POST", "/sandboxes/local/timeout", nativeToken, `{"timeout":60}`, 204},
		{"DELETE", "/sandboxes/local", nativeToken, ``, 204},
		{"POST", "/v2/sandboxes", "", `{}`, 401},
		{"POST", "/v2/sandboxes", "guess", `{}`, 401},
		{"POST", "/v2/sandboxes/other/connect", nativeToken, `{}`, 404},
		{"DELETE", "/sandboxes/other", nativeToken, ``, 404},
		{"POST", "/v2/sandboxes", nativeToken, `[]`, 400},
		{"POST", "/v2/sandboxes", nativeToken, `{"envVars":{"A=B":"x"}}`, 400},
		{"POST", "/v2/sandboxes", nativeToken, `null`, 400},
		{"POST", "/v2/sandboxes", nativeToken, ``, 400},
		{"POST", "/v2/sandboxes", nativeToken, `{"templateID":"base"} {"templateID":"x"}`, 400},
		{"POST", "/v2/sandboxes", nativeToken, `{"templateID":"base","tempalteID":"misspelt"}`, 400},
		{"POST", "/v2/sandboxes", nativeToken, `{"envVars":{"RAYITO_ACCESS_TOKEN":"x"}}`, 400},
		{"POST", "/v2/sandboxes", nativeToken, `{"envVars":{"A":"x\u0000y"}}`, 400},
		{"POST", "/v2/sandboxes", nativeToken, `{"templateID":"base","timeout":300,"metadata":{"k":"v"},"secure":true,"autoPause":false,"mcp":null,"allow_internet_access":true}`, 201},
	} {
		status, body := call(c.method, c.path, c.key, c.body)
		if status != c.status {
			t.Errorf("%s %s with key %q: %d %v, want %d", c.method, c.path, c.key, status, body, c.status)
		}
		if status >= 400 && (body["code"] != float64(status) || body["message"] == "") {
			t.Errorf("%s %s: error body %v is not E2B's shape", c.method, c.path, body)
		}
	}
	// Without --e2b-api, nothing answers there.
	plain := newAgent(t, agentOptions{})
	resp, err := http.Post(plain.url+"/v2/sandboxes", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /v2/sandboxes without --e2b-api: %d", resp.StatusCode)
	}
}
