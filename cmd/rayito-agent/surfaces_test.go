package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestSurfacesMounted: the agent serves jupyter_server's API and the
// code-interpreter API on its listener, and the code-interpreter API on
// the second listener when asked; all of them reach the same kernels.
func TestSurfacesMounted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ciAddr := l.Addr().String()
	l.Close()
	base := "http" + strings.TrimPrefix(startAgent(t, "surface-token", "--code-interpreter-listen", ciAddr), "ws")
	second := "http://" + ciAddr

	do := func(method, url, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	jupyterAuth := []string{"Authorization", "token surface-token"}
	e2bAuth := []string{"X-Access-Token", "surface-token"}

	if code, body := do("GET", base+"/api/kernelspecs", "", jupyterAuth...); code != 200 || !strings.Contains(body, `"python3"`) {
		t.Fatalf("kernelspecs: %d %s", code, body)
	}
	if code, body := do("POST", second+"/execute", `{"code":"shared = 'both listeners'"}`, e2bAuth...); code != 200 || !strings.HasSuffix(body, "{\"type\":\"end_of_execution\"}\n") {
		t.Fatalf("execute on the second listener: %d %s", code, body)
	}
	if code, body := do("POST", base+"/execute", `{"code":"shared"}`, e2bAuth...); code != 200 || !strings.Contains(body, `"text":"both listeners"`) {
		t.Fatalf("execute on the main listener: %d %s", code, body)
	}
	if code, body := do("GET", base+"/api/kernels", "", jupyterAuth...); code != 200 || !strings.Contains(body, `"execution_state"`) {
		t.Fatalf("the default kernel is a Jupyter kernel too: %d %s", code, body)
	}
	// The second listener serves the code-interpreter API only.
	for _, path := range []string{"/api/kernels", "/health", "/v1/connect"} {
		if code, _ := do("GET", second+path, "", jupyterAuth...); code != 404 && code != 401 {
			t.Errorf("second listener serves %s: %d", path, code)
		}
	}
	if code, _ := do("GET", second+"/contexts", ""); code != 401 {
		t.Errorf("second listener without a token: %d", code)
	}
}

func TestParseCodeInterpreterListen(t *testing.T) {
	if c, err := parseServe(nil); err != nil || c.codeInterpListen != "" {
		t.Fatalf("off by default: %+v, %v", c, err)
	}
	t.Setenv("RAYITO_CODE_INTERPRETER_LISTEN", "127.0.0.1:49999")
	if c, err := parseServe(nil); err != nil || c.codeInterpListen != "127.0.0.1:49999" {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	if c, err := parseServe([]string{"--code-interpreter-listen", ":50000"}); err != nil || c.codeInterpListen != ":50000" {
		t.Fatalf("the flag wins: %+v, %v", c, err)
	}
}
