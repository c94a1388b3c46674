package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// UpgradeOptions is a host's upgrade of the agent (protocol.md section
// 7, Upgrade): the new binary as a Path already in the guest (owned by
// root, writable by nobody else), or its bytes in Binary.
type UpgradeOptions struct {
	Path   string
	Binary []byte
	// SHA256 is the binary's, in hex: checked by the agent before it lets
	// go; computed from Binary when empty.
	SHA256 string
	// DeadlineMs bounds the upgrade from the call to the exec (0: the
	// agent's default, 10 s).
	DeadlineMs int64
	// UpgradeID names the upgrade, so a call repeated after a lost answer
	// gets the first one's outcome; "" makes one.
	UpgradeID string
	// Progress, if set, hears each attempt and retry.
	Progress func(msg string)
}

// UpgradeAnswer is what an upgrade did. State is "upgraded", or "failed"
// (the previous agent serves on; Error says why).
type UpgradeAnswer struct {
	UpgradeID   string      `json:"upgrade_id"`
	State       string      `json:"state"`
	FromVersion string      `json:"from_version"`
	ToVersion   string      `json:"to_version"`
	Format      int         `json:"format"`
	Steps       []PauseStep `json:"steps"`
	AtUnixMs    int64       `json:"at_unix_ms"`
	DurationMs  float64     `json:"duration_ms"`
	FrozenMs    float64     `json:"frozen_ms"`
	Error       string      `json:"error,omitempty"`
}

// upgradeTries bounds the repeats of an upgrade whose connection was
// lost: the agent answers a repeat of its upgrade_id at once.
const upgradeTries = 5

// Upgrade hands the sandbox to a new agent binary, keeping what it runs.
// The answer comes on the same connection, from the new agent; if that
// connection is lost, the call is repeated with the same upgrade_id and
// gets the first one's outcome. A failed upgrade is an error (an *Error
// with CodeInternal) beside the answer that says what happened.
func (h Host) Upgrade(ctx context.Context, o UpgradeOptions) (UpgradeAnswer, error) {
	if (o.Path == "") == (o.Binary == nil) {
		return UpgradeAnswer{}, errors.New("client: Upgrade takes a Path or a Binary")
	}
	if _, _, _, err := endpointURLs(h.URL); err != nil {
		return UpgradeAnswer{}, err // not worth repeating
	}
	if o.UpgradeID == "" {
		o.UpgradeID = "up-" + newOpPrefix() + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if o.Binary != nil && o.SHA256 == "" {
		sum := sha256.Sum256(o.Binary)
		o.SHA256 = hex.EncodeToString(sum[:])
	}
	var last error
	for try := range upgradeTries {
		if try > 0 && o.Progress != nil {
			o.Progress(fmt.Sprintf("the answer was lost (%v): asking again for upgrade %s", last, o.UpgradeID))
		}
		a, err, sent := h.upgradeOnce(ctx, o)
		if sent || ctx.Err() != nil {
			return a, err
		}
		last = err
		select {
		case <-ctx.Done():
			return a, err
		case <-time.After(time.Duration(50<<try) * time.Millisecond):
		}
	}
	return UpgradeAnswer{}, last
}

// upgradeOnce sends the upgrade once; sent says an answer came (the
// error is then the agent's), not a lost connection.
func (h Host) upgradeOnce(ctx context.Context, o UpgradeOptions) (a UpgradeAnswer, err error, sent bool) {
	var body io.Reader
	path, ctype := "/v1/upgrade", "application/json"
	if o.Binary != nil {
		q := url.Values{"sha256": {o.SHA256}, "upgrade_id": {o.UpgradeID}}
		if o.DeadlineMs > 0 {
			q.Set("deadline_ms", strconv.FormatInt(o.DeadlineMs, 10))
		}
		path += "?" + q.Encode()
		body, ctype = bytes.NewReader(o.Binary), "application/octet-stream"
	} else {
		b, _ := json.Marshal(struct {
			Path       string `json:"path"`
			SHA256     string `json:"sha256,omitempty"`
			DeadlineMs int64  `json:"deadline_ms,omitempty"`
			UpgradeID  string `json:"upgrade_id"`
		}{o.Path, o.SHA256, o.DeadlineMs, o.UpgradeID})
		body = bytes.NewReader(b)
	}
	status, data, err := h.send(ctx, path, ctype, body)
	if err != nil {
		// No answer: the connection was lost (the agent may have
		// upgraded meanwhile; a repeat of the id says).
		return a, err, false
	}
	if status == http.StatusInternalServerError {
		// A failed upgrade: the error, and the answer beside it.
		var f struct {
			Upgrade *UpgradeAnswer `json:"upgrade"`
		}
		if json.Unmarshal(data, &f) == nil && f.Upgrade != nil {
			a = *f.Upgrade
		}
	}
	return a, decodeAnswer("POST /v1/upgrade", status, data, &a), true
}
