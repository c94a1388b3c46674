package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestResumeCommand: each new resume id bumps the generation once; a
// repeated id gets the same answer; a wrong token fails.
func TestResumeCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	resume := func(args ...string) (uint64, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := runResume(append([]string{"--url", url}, args...), &out, &errb); code != 0 {
			t.Fatalf("resume %v: exit %d: %s", args, code, errb.String())
		}
		var h struct {
			Generation uint64 `json:"resume_generation"`
			Last       struct {
				ResumeID string `json:"resume_id"`
			} `json:"last_resume"`
		}
		if err := json.Unmarshal(out.Bytes(), &h); err != nil {
			t.Fatalf("%s: %v", out.String(), err)
		}
		return h.Generation, h.Last.ResumeID
	}
	if g, id := resume("--id", "r1"); g != 1 || id != "r1" {
		t.Fatalf("first resume: generation %d, id %q", g, id)
	}
	if g, _ := resume("--id", "r1"); g != 1 {
		t.Fatalf("repeated id: generation %d", g)
	}
	if g, id := resume("--id", "r2"); g != 2 || id != "r2" {
		t.Fatalf("second resume: generation %d, id %q", g, id)
	}
	t.Setenv("RAYITO_ACCESS_TOKEN", "wrong")
	var errb bytes.Buffer
	if code := runResume([]string{"--url", url}, &bytes.Buffer{}, &errb); code != 1 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("wrong token: exit %d, %q", code, errb.String())
	}
}

// TestResumeTimeNow checks the body --time-now sends, against a server
// that records it: the real agent would set this machine's clock.
func TestResumeTimeNow(t *testing.T) {
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/resume" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		json.NewDecoder(r.Body).Decode(&body)
		w.Write([]byte(`{"status":"ok","resume_generation":5}`))
	}))
	defer srv.Close()
	t.Setenv("RAYITO_ACCESS_TOKEN", "tok")
	before := time.Now().UnixNano()
	var out, errb bytes.Buffer
	if code := runResume([]string{"--url", srv.URL, "--time-now", "--id", "x", "--entropy", "--sandbox-id", "sb"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	ns, _ := body["time_unix_ns"].(float64)
	entropy, _ := base64.StdEncoding.DecodeString(fmt.Sprint(body["entropy"]))
	if body["resume_id"] != "x" || ns < float64(before) || ns > float64(time.Now().UnixNano()) || len(entropy) != 32 || body["sandbox_id"] != "sb" {
		t.Fatalf("body %v", body)
	}
	if !strings.Contains(out.String(), `"resume_generation": 5`) {
		t.Fatalf("printed %s", out.String())
	}
}
