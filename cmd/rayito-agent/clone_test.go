package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

type cloneHealth struct {
	Instance   string `json:"instance"`
	SandboxID  string `json:"sandbox_id"`
	Generation uint64 `json:"resume_generation"`
	Last       struct {
		Reseeded       bool     `json:"reseeded"`
		EntropySources []string `json:"entropy_sources"`
		ReseedError    string   `json:"reseed_error"`
		NewSandbox     bool     `json:"new_sandbox"`
	} `json:"last_resume"`
	Error struct {
		Code string `json:"code"`
	} `json:"error"`
}

func hostPost(t *testing.T, base, token, path, body string) (int, cloneHealth, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h cloneHealth
	json.Unmarshal(b, &h)
	return resp.StatusCode, h, string(b)
}

// TestNewSandboxIdentity: a resume naming a new sandbox gives the agent a
// new instance; the template's ended streams are gone and its running
// ones are attachable without what they printed before; the same id again
// changes nothing. The host's entropy is re-keyed in and never appears in
// a response or the log, even at debug level; bad entropy is 400.
func TestNewSandboxIdentity(t *testing.T) {
	const token = "clone-token"
	var log lockedBuffer
	ag := startAgentWith(t, token, agentOptions{flags: "--log-level debug", stderr: &log})
	base := "http" + strings.TrimPrefix(ag.url, "ws")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, ag.url, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ended, err := c.Exec(ctx, client.ExecOptions{Cmd: "echo template-secret"})
	if err != nil {
		t.Fatal(err)
	}
	ended.Wait(ctx)
	running, err := c.Exec(ctx, client.ExecOptions{Cmd: "echo built-in-template; exec sleep 120"})
	if err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 18); func() bool { _, err := io.ReadFull(running.Stdout(), b); return err != nil }() {
		t.Fatal("reading the running command's first line")
	}
	before := c.Instance()

	secret := make([]byte, 48)
	rand.Read(secret)
	b64 := base64.StdEncoding.EncodeToString(secret)
	code, h, raw := hostPost(t, base, token, "/v1/resume", `{"resume_id":"r1","sandbox_id":"sb-2","entropy":"`+b64+`"}`)
	if code != 200 || !h.Last.NewSandbox || h.SandboxID != "sb-2" || h.Instance == before || h.Instance == "" {
		t.Fatalf("resume as a new sandbox: %d %s (instance before %s)", code, raw, before)
	}
	if h.Last.Reseeded != (h.Last.ReseedError == "") || !strings.Contains(strings.Join(h.Last.EntropySources, ","), "host") {
		t.Fatalf("last_resume %s", raw)
	}
	c2, err := client.Dial(ctx, ag.url, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Instance() != h.Instance {
		t.Fatalf("a new client sees instance %s, health %s", c2.Instance(), h.Instance)
	}
	if _, err := c2.Attach(ctx, client.AttachOptions{Stream: ended.Stream()}); err == nil {
		t.Fatal("the template's ended command is still attachable")
	}
	var mu sync.Mutex
	var got bytes.Buffer
	p, err := c2.Attach(ctx, client.AttachOptions{Stream: running.Stream(), OnStdout: func(b []byte) { mu.Lock(); got.Write(b); mu.Unlock() }})
	if err != nil {
		t.Fatalf("the template's running command: %v", err)
	}
	p.Signal(ctx, client.SIGKILL)
	p.Wait(ctx)
	if strings.Contains(got.String(), "built-in-template") {
		t.Fatal("a new sandbox read what the template's command printed")
	}

	if code, h2, raw := hostPost(t, base, token, "/v1/resume", `{"resume_id":"r2","sandbox_id":"sb-2"}`); code != 200 || h2.Last.NewSandbox || h2.Instance != h.Instance {
		t.Fatalf("the same sandbox id again: %d %s", code, raw)
	}
	for _, bad := range []string{
		base64.StdEncoding.EncodeToString(secret[:31]),
		base64.StdEncoding.EncodeToString(bytes.Repeat(secret, 11)[:513]),
		"%%%not-base64%%%",
	} {
		for _, path := range []string{"/v1/resume", "/v1/init"} {
			code, h, raw := hostPost(t, base, token, path, `{"entropy":"`+bad+`"}`)
			if code != 400 || h.Error.Code != "bad_request" || strings.Contains(raw, bad) {
				t.Fatalf("%s with bad entropy: %d %s", path, code, raw)
			}
		}
	}
	if code, _, raw := hostPost(t, base, token, "/v1/init", `{"sandbox_id":"`+strings.Repeat("x", 129)+`"}`); code != 400 {
		t.Fatalf("a 129-byte sandbox_id: %d %s", code, raw)
	}
	if code, h, raw := hostPost(t, base, token, "/v1/init", `{"sandbox_id":"sb-3","entropy":"`+b64+`"}`); code != 200 || h.SandboxID != "sb-3" || h.Instance == c2.Instance() {
		t.Fatalf("init as a new sandbox: %d %s", code, raw)
	}
	ag.stop()
	l := log.String()
	if !strings.Contains(l, `"level":"debug"`) {
		t.Fatal("the agent logged nothing at debug level: the check below would prove nothing")
	}
	if strings.Contains(l, b64) || strings.Contains(l, string(secret)) || strings.Contains(l, base64.StdEncoding.EncodeToString(secret[:31])) {
		t.Fatal("the host's entropy appears in the agent's log")
	}
}
