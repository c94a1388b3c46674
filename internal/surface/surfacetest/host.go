package surfacetest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// PostJSON posts body to url as a host does (JSON, the token if not "")
// and returns the answer's status and body.
func PostJSON(t testing.TB, url, token, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return send(t, req, token)
}

// send sends req with the token (none if "") and reads the answer.
func send(t testing.TB, req *http.Request, token string) (int, []byte) {
	t.Helper()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// PostObject is PostJSON for an answer that must be a JSON object.
func PostObject(t testing.TB, url, token, body string) (int, map[string]any) {
	t.Helper()
	status, b := PostJSON(t, url, token, body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %s", url, b)
	}
	return status, m
}

// Get reads url with the token and returns the answer's status and body.
func Get(t testing.TB, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	return send(t, req, token)
}

// Metric reads one unlabelled value from the agent's /metrics at base.
func Metric(t testing.TB, base, token, name string) float64 {
	t.Helper()
	status, body := Get(t, base+"/metrics", token)
	if status != 200 {
		t.Fatalf("/metrics: %d", status)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, line)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics:\n%s", name, body)
	return 0
}
