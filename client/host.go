package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// ResumeOptions is the body of POST /v1/resume; every field is optional.
type ResumeOptions struct {
	// ResumeID makes retries of one resume idempotent: a repeated id gets
	// the first answer again.
	ResumeID string
	// TimeUnixNs is the wall clock the agent sets first; 0: leave it.
	TimeUnixNs int64
	// Entropy is fresh random bytes from the host (32 to 512) the agent
	// mixes into the guest's CRNG before it re-keys it: send new bytes
	// on every resume of a snapshot that is resumed more than once.
	Entropy []byte
	// SandboxID names the sandbox this copy of the snapshot now is (at
	// most 128 bytes): another id than the last gives the agent a new
	// identity (protocol section 7).
	SandboxID string
	// Network, if set, is what the guest's network is now (a clone on
	// another host): the agent applies it before user work thaws.
	Network *NetworkFacts
}

// NetworkFacts is the host's word on the guest's network at a resume;
// empty fields stay as they are.
type NetworkFacts struct {
	Interface string   `json:"interface,omitempty"` // "": the one the guest talks through
	Address   string   `json:"address,omitempty"`   // IPv4 with its prefix, such as 10.0.2.15/24
	Gateway   string   `json:"gateway,omitempty"`   // IPv4
	DNS       []string `json:"dns,omitempty"`       // at most 3
}

// InitOptions is the body of POST /v1/init; zero fields are left out.
type InitOptions struct {
	// AccessToken replaces the agent's token for every later request (a
	// Client that sends it uses the new token from then on).
	AccessToken string
	Env         map[string]string
	DefaultUser string
	DefaultCwd  string
	TimeUnixNs  int64
	// MaxIdleSeconds sets the idle policy (at least 60).
	MaxIdleSeconds int
	// Entropy and SandboxID work as in ResumeOptions.
	Entropy   []byte
	SandboxID string
}

// Host makes the host's calls (init, resume, health) over plain HTTP,
// without a websocket: what a control plane needs.
type Host struct {
	URL        string // as for Dial
	Token      string
	HTTPClient *http.Client // nil: http.DefaultClient
}

// Resume tells the agent the VM was just resumed. It answers, like
// Health, once the resume sequence is done: every websocket opened before
// it was closed with 4000 (a Client reconnects and reattaches its
// handles on its own).
func (h Host) Resume(ctx context.Context, o ResumeOptions) (Health, error) {
	body := struct {
		ResumeID   string        `json:"resume_id,omitempty"`
		TimeUnixNs int64         `json:"time_unix_ns,omitempty"`
		Entropy    []byte        `json:"entropy,omitempty"` // base64, as encoding/json writes []byte
		SandboxID  string        `json:"sandbox_id,omitempty"`
		Network    *NetworkFacts `json:"network,omitempty"`
	}{o.ResumeID, o.TimeUnixNs, o.Entropy, o.SandboxID, o.Network}
	var out Health
	return out, h.post(ctx, "/v1/resume", body, &out)
}

// Init configures the agent (section 9 of the protocol).
func (h Host) Init(ctx context.Context, o InitOptions) (Health, error) {
	type idlePolicy struct {
		MaxIdleSeconds int `json:"max_idle_seconds"`
	}
	body := struct {
		AccessToken string            `json:"access_token,omitempty"`
		Env         map[string]string `json:"env,omitempty"`
		DefaultUser string            `json:"default_user,omitempty"`
		DefaultCwd  string            `json:"default_cwd,omitempty"`
		TimeUnixNs  int64             `json:"time_unix_ns,omitempty"`
		IdlePolicy  *idlePolicy       `json:"idle_policy,omitempty"`
		Entropy     []byte            `json:"entropy,omitempty"`
		SandboxID   string            `json:"sandbox_id,omitempty"`
	}{AccessToken: o.AccessToken, Env: o.Env, DefaultUser: o.DefaultUser, DefaultCwd: o.DefaultCwd, TimeUnixNs: o.TimeUnixNs,
		Entropy: o.Entropy, SandboxID: o.SandboxID}
	if o.MaxIdleSeconds != 0 {
		body.IdlePolicy = &idlePolicy{o.MaxIdleSeconds}
	}
	var out Health
	return out, h.post(ctx, "/v1/init", body, &out)
}

// Health reads the agent's /health, all of it with the token.
func (h Host) Health(ctx context.Context) (Health, error) {
	var out Health
	return out, h.get(ctx, "/health", &out)
}

// HealthJSON is Health as the agent wrote it.
func (h Host) HealthJSON(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	return out, h.get(ctx, "/health", &out)
}

func (h Host) get(ctx context.Context, path string, out any) error {
	base, _, dial, err := endpointURLs(h.URL)
	if err != nil {
		return err
	}
	return getJSON(ctx, withDialer(h.HTTPClient, dial), base+path, h.Token, out)
}

// Traffic reads the agent's /v1/traffic: byte counters, idleness and
// the holds that keep the sandbox awake. Reading it is not traffic.
func (h Host) Traffic(ctx context.Context) (Traffic, error) {
	var t Traffic
	return t, h.get(ctx, "/v1/traffic", &t)
}

func (h Host) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	status, data, err := h.send(ctx, path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	return decodeAnswer("POST "+path, status, data, out)
}

// send POSTs body to path (with its query) and reads the answer, at most
// 1 MiB; an error is the transport's.
func (h Host) send(ctx context.Context, path, ctype string, body io.Reader) (status int, data []byte, err error) {
	base, _, dial, err := endpointURLs(h.URL)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", ctype)
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	hc := withDialer(h.HTTPClient, dial)
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("client: POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("client: POST %s: %w", path, err)
	}
	return resp.StatusCode, data, nil
}

// accessToken is the token every dial and HTTP call sends.
func (c *Client) accessToken() string { return *c.token.Load() }

// host is the Client's Host: same address, token and HTTP client.
func (c *Client) host() Host {
	return Host{URL: c.httpBase, Token: c.accessToken(), HTTPClient: c.opts.HTTPClient}
}

// Resume is Host.Resume with the client's address and token. The client's
// own connection is among those closed: its handles reattach.
func (c *Client) Resume(ctx context.Context, o ResumeOptions) (Health, error) {
	return c.host().Resume(ctx, o)
}

// Init is Host.Init with the client's address and token; a new
// AccessToken becomes the client's token for later reconnects and calls.
func (c *Client) Init(ctx context.Context, o InitOptions) (Health, error) {
	h, err := c.host().Init(ctx, o)
	if err == nil && o.AccessToken != "" {
		tok := o.AccessToken
		c.token.Store(&tok)
	}
	return h, err
}
