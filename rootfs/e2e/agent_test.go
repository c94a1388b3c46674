package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// health is the part of GET /health the tests read.
type health struct {
	Status           string `json:"status"`
	Version          string `json:"version"`
	ResumeGeneration int    `json:"resume_generation"`
	UptimeMS         int64  `json:"uptime_ms"`
	// Instance is the stand-in agent's per-start nonce; empty for the
	// real agent.
	Instance string `json:"instance"`
}

func getHealth(ctx context.Context, base string) (health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return health{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return health{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return health{}, fmt.Errorf("GET /health: %s", resp.Status)
	}
	var h health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return health{}, fmt.Errorf("GET /health: %w", err)
	}
	if h.Status != "ok" {
		return h, fmt.Errorf("GET /health: status %q", h.Status)
	}
	return h, nil
}

// agentOps is what the tests do inside the guest beyond /health. The
// stand-in agent does it over plain HTTP; an implementation over the real
// agent's websocket (exec) slots in next to standinOps in opsFor.
type agentOps interface {
	WriteFile(ctx context.Context, path string, data []byte) error
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// KillAgent makes the agent process die, as a crash would.
	KillAgent(ctx context.Context) error
}

var errNotFound = errors.New("no such file in the guest")

// opsFor picks the implementation for the agent in the image, or skips.
func opsFor(t *testing.T, base string, h health) agentOps {
	t.Helper()
	if h.Version == "standin" {
		return standinOps{base: base}
	}
	t.Skipf("guest operations for agent version %q are not wired into the e2e tests yet", h.Version)
	return nil
}

type standinOps struct{ base string }

func (s standinOps) WriteFile(ctx context.Context, path string, data []byte) error {
	_, err := s.do(ctx, http.MethodPut, "/standin/file?path="+url.QueryEscape(path), data)
	return err
}

func (s standinOps) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return s.do(ctx, http.MethodGet, "/standin/file?path="+url.QueryEscape(path), nil)
}

func (s standinOps) KillAgent(ctx context.Context) error {
	_, err := s.do(ctx, http.MethodPost, "/standin/exit", nil)
	return err
}

func (s standinOps) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s %s: %w", method, path, errNotFound)
	case resp.StatusCode >= 300:
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return b, nil
}
