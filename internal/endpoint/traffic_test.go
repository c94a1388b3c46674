package endpoint

import (
	"encoding/json"
	"net/http"
	"testing"
)

func (a *testAgent) get(t *testing.T, path string) (int, []byte) {
	req, _ := http.NewRequest("GET", a.http.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b
}

// TestPollsDoNotCountAsTraffic: a host that probes health, scrapes metrics
// and polls traffic must not keep the sandbox awake.
func TestPollsDoNotCountAsTraffic(t *testing.T) {
	a := newTestAgent(t)
	before := a.traffic.Snapshot()
	for i := 0; i < 20; i++ {
		for _, p := range []string{"/health", "/v1/traffic", "/metrics"} {
			if status, _ := a.get(t, p); status != 200 {
				t.Fatalf("%s: %d", p, status)
			}
		}
	}
	after := a.traffic.Snapshot()
	if after.BytesIn != 0 || after.BytesOut != 0 || after.LastActivityUnixMs != before.LastActivityUnixMs {
		t.Fatalf("polls counted: before %+v after %+v", before, after)
	}
	// Websocket payloads do count, both ways.
	rc := a.dial(t)
	resp := rc.call(map[string]any{"op": "list"})
	if resp["result"] == nil {
		t.Fatalf("list: %v", resp)
	}
	_, body := a.get(t, "/v1/traffic")
	var tr struct {
		BytesIn     uint64 `json:"bytes_in"`
		BytesOut    uint64 `json:"bytes_out"`
		Connections int    `json:"connections"`
	}
	json.Unmarshal(body, &tr)
	if tr.BytesIn == 0 || tr.BytesOut == 0 || tr.Connections != 1 {
		t.Fatalf("websocket traffic not counted: %s", body)
	}
}

func TestAuthRequired(t *testing.T) {
	a := newTestAgent(t)
	for _, p := range []string{"/v1/traffic", "/metrics", "/v1/connect"} {
		req, _ := http.NewRequest("GET", a.http.URL+p, nil)
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s with a wrong token: %d", p, resp.StatusCode)
		}
	}
	resp, err := http.Get(a.http.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health without a token: %v %v", resp, err)
	}
}
