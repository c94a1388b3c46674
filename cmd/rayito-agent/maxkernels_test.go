package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestMaxKernels: --max-kernels bounds the kernels of every surface
// together. A start beyond it is refused with limit (429 over HTTP) and
// a message that says how many run and how to stop one; once one is shut
// down, a start succeeds again.
func TestMaxKernels(t *testing.T) {
	a := startAgentProc(t, "--max-kernels", "1")
	c := a.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, err := c.StartKernel(ctx, client.KernelOptions{Name: "python3"}) // named: not the default kernel
	if err != nil {
		t.Fatal(err)
	}
	wantLimit := func(what string, msg string) {
		t.Helper()
		for _, words := range []string{"1 running", "--max-kernels 1", "shut one down"} {
			if !strings.Contains(msg, words) {
				t.Errorf("%s: %q does not say %q", what, msg, words)
			}
		}
	}
	_, err = c.StartKernel(ctx, client.KernelOptions{})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeLimit {
		t.Fatalf("a second native kernel_start: %v, want limit", err)
	}
	wantLimit("native kernel_start", e.Message)

	base := "http://" + a.addr
	do := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		return httpDo(t, method, base+path, body, append([]string{"Content-Type", "application/json"}, header...)...)
	}
	jupyter := []string{"Authorization", "token " + benchToken}
	e2b := []string{"X-Access-Token", benchToken}
	for _, r := range []struct {
		what, path, body string
		header           []string
	}{
		{"jupyter_server POST /api/kernels", "/api/kernels", `{"name":"python3"}`, jupyter},
		{"jupyter_server POST /api/sessions", "/api/sessions", `{"path":"a.ipynb","type":"notebook","kernel":{"name":"python3"}}`, jupyter},
		{"code interpreter POST /contexts", "/contexts", `{"language":"python"}`, e2b},
	} {
		code, body := do("POST", r.path, r.body, r.header...)
		if code != http.StatusTooManyRequests {
			t.Errorf("%s: %d %s, want 429", r.what, code, body)
			continue
		}
		wantLimit(r.what, body)
	}
	// The native default kernel is a start too.
	_, err = c.DefaultKernel().Execute(ctx, "1 + 1", client.ExecuteOptions{})
	if !errors.As(err, &e) || e.Code != client.CodeLimit {
		t.Fatalf("a cell on the default kernel while the limit is reached: %v, want limit", err)
	}

	if err := k.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := do("POST", "/api/kernels", `{"name":"python3"}`, jupyter...); code != http.StatusCreated {
		t.Fatalf("a start after a shutdown: %d %s", code, body)
	}
}
