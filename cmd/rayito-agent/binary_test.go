package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBuiltBinaryServesEverySurface: the binary as make build builds it
// (without net/http's HTTP/2) serves every surface over HTTP/1.1: a
// Connect unary call and a server stream (envd, as the e2b SDK calls
// them), the native websocket, the Jupyter REST API, the host's health.
func TestBuiltBinaryServesEverySurface(t *testing.T) {
	a := startAgentProc(t)
	base := "http://" + a.addr
	do := func(method, path, contentType string, body []byte, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 1 {
			t.Errorf("%s answered over %s", path, resp.Proto)
		}
		return resp
	}
	envd := []string{"X-Access-Token", benchToken, "Connect-Protocol-Version", "1"}
	resp := do("POST", "/process.Process/List", "application/json", []byte("{}"), envd...)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("envd List: %d", resp.StatusCode)
	}
	msg := []byte(`{"process":{"cmd":"echo","args":["over http/1.1"]},"stdin":false}`)
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	resp = do("POST", "/process.Process/Start", "application/connect+json", env, envd...)
	stream, _ := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(stream, []byte(`"start"`)) || !bytes.Contains(stream, []byte(`"end"`)) {
		t.Fatalf("envd Start stream: %d %q", resp.StatusCode, stream)
	}
	resp = do("GET", "/api/kernelspecs", "", nil, "Authorization", "token "+benchToken)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "kernelspecs") {
		t.Fatalf("jupyter kernelspecs: %d %s", resp.StatusCode, b)
	}
	resp = do("GET", "/health", "", nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health: %d", resp.StatusCode)
	}
	c := a.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.List(ctx, ""); err != nil {
		t.Fatalf("native websocket: %v", err)
	}
}
