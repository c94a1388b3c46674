package hostapi

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Upgrader hands the sandbox to a new agent binary; resume.Manager
// implements it.
type Upgrader interface {
	PrepareUpgrade(ctx context.Context, req resume.UpgradeRequest) (*resume.Upgrade, *resume.UpgradeAnswer, error)
}

// Bounds of an upgrade's body.
const (
	// MaxUpgradeBinary bounds a binary sent in the body: the agent is
	// about 20 MiB.
	MaxUpgradeBinary = 256 << 20
	// upgradeBodyTime bounds reading it.
	upgradeBodyTime = time.Minute
	maxUpgradeID    = 256
)

type upgradeBody struct {
	Path       string `json:"path"`
	SHA256     string `json:"sha256"`
	DeadlineMs *int64 `json:"deadline_ms"`
	UpgradeID  string `json:"upgrade_id"`
}

// handleUpgrade is POST /v1/upgrade: the new binary's path in a JSON
// body, or the binary itself as application/octet-stream with sha256,
// deadline_ms and upgrade_id in the query. Everything is checked before
// anything stops; then the host's connection is carried across the exec
// and the new agent answers on it.
func (s *API) handleUpgrade(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Upgrade == nil {
		surface.WriteErr(w, wire.Errorf(wire.CodeUnsupported, "upgrade is not available in this agent"))
		return
	}
	req, e := upgradeRequest(w, r)
	if e != nil {
		surface.WriteErr(w, e)
		return
	}
	defer req.Binary.Close()
	u, repeat, err := s.cfg.Upgrade.PrepareUpgrade(r.Context(), req)
	switch {
	case repeat != nil:
		writeUpgradeAnswer(w, *repeat)
		return
	case errors.Is(err, resume.ErrBadUpgrade):
		surface.WriteErr(w, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	case errors.Is(err, resume.ErrUpgradeBusy), errors.Is(err, resume.ErrCannotCarry):
		surface.WriteErr(w, wire.Errorf(wire.CodeConflict, "%v", err))
		return
	case err != nil:
		surface.WriteErr(w, wire.Errorf(wire.CodeInternal, "%v", err))
		return
	}
	// The connection leaves the HTTP server: the surfaces' suspension
	// waits for every request but this one, and the new agent answers it.
	conn, _, err := http.NewResponseController(w).Hijack()
	var caller *os.File
	if err == nil {
		caller, err = surface.ConnFile(conn)
	}
	if err != nil {
		u.Cancel()
		if conn != nil {
			conn.Close()
		}
		s.log.Warn("upgrade: cannot take the host's connection", zap.Error(err))
		return
	}
	a := u.Run(caller)
	// Only a failure comes back: the previous agent answers.
	caller.Close()
	writeRaw(conn, a)
	conn.Close()
}

func upgradeRequest(w http.ResponseWriter, r *http.Request) (resume.UpgradeRequest, *wire.Error) {
	var req resume.UpgradeRequest
	if r.Header.Get("Origin") != "" {
		return req, wire.Errorf(wire.CodeBadRequest, "%s is for the host, which sends no Origin header: refused from a web page", r.URL.Path)
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var body upgradeBody
	switch mt {
	case "application/json":
		if e := decodeBody(w, r, &body); e != nil {
			return req, e
		}
		if !filepath.IsAbs(body.Path) {
			return req, wire.Errorf(wire.CodeBadRequest, "path must be the new binary's absolute path in the guest, got %q", body.Path)
		}
	case "application/octet-stream":
		q := r.URL.Query()
		body.SHA256, body.UpgradeID = q.Get("sha256"), q.Get("upgrade_id")
		if v := q.Get("deadline_ms"); v != "" {
			d, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return req, wire.Errorf(wire.CodeBadRequest, "deadline_ms must be a number of milliseconds, got %q", v)
			}
			body.DeadlineMs = &d
		}
		if body.SHA256 == "" {
			return req, wire.Errorf(wire.CodeBadRequest, "a binary in the body needs its sha256 in the query")
		}
	default:
		return req, wire.Errorf(wire.CodeBadRequest, "%s takes the binary's path as application/json, or the binary as application/octet-stream; got %q", r.URL.Path, r.Header.Get("Content-Type"))
	}
	if body.SHA256 != "" {
		if b, err := hex.DecodeString(body.SHA256); err != nil || len(b) != 32 {
			return req, wire.Errorf(wire.CodeBadRequest, "sha256 must be 64 hex digits")
		}
	}
	if len(body.UpgradeID) > maxUpgradeID {
		return req, wire.Errorf(wire.CodeBadRequest, "upgrade_id longer than %d bytes", maxUpgradeID)
	}
	req.ID, req.SHA256 = body.UpgradeID, body.SHA256
	if body.DeadlineMs != nil {
		d := *body.DeadlineMs
		if d < resume.MinUpgradeDeadline.Milliseconds() || d > resume.MaxUpgradeDeadline.Milliseconds() {
			return req, wire.Errorf(wire.CodeBadRequest, "deadline_ms must be %d to %d, got %d", resume.MinUpgradeDeadline.Milliseconds(), resume.MaxUpgradeDeadline.Milliseconds(), d)
		}
		req.Deadline = time.Duration(d) * time.Millisecond
	}
	var err error
	if mt == "application/json" {
		req.Binary, err = os.Open(body.Path)
		if err != nil {
			return req, wire.Errorf(wire.CodeBadRequest, "the new binary: %v", err)
		}
		return req, nil
	}
	req.Binary, err = receiveBinary(w, r)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			return req, we
		}
		return req, wire.Errorf(wire.CodeBadRequest, "receiving the binary: %v", err)
	}
	return req, nil
}

// receiveBinary reads the body into a memfd, memory the agent alone
// holds: nothing in the sandbox can change it between the check and the
// exec.
func receiveBinary(w http.ResponseWriter, r *http.Request) (*os.File, error) {
	if r.ContentLength > MaxUpgradeBinary {
		return nil, wire.Errorf(wire.CodeLimit, "a binary larger than %d bytes", MaxUpgradeBinary)
	}
	fd, err := unix.MemfdCreate("rayito-agent-upgrade", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "rayito-agent-upgrade")
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(upgradeBodyTime))
	n, err := io.Copy(f, io.LimitReader(r.Body, MaxUpgradeBinary+1))
	if err == nil && n > MaxUpgradeBinary {
		err = wire.Errorf(wire.CodeLimit, "a binary larger than %d bytes", MaxUpgradeBinary)
	}
	if err == nil {
		err = f.Chmod(0o700)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func writeUpgradeAnswer(w http.ResponseWriter, a resume.UpgradeAnswer) {
	status, body := upgradeReply(a)
	surface.WriteJSON(w, status, body)
}

// upgradeReply is an upgrade's status and body: the answer when it
// upgraded; a failure is an error (500), with the answer beside it.
func upgradeReply(a resume.UpgradeAnswer) (int, any) {
	if a.State == "upgraded" {
		return http.StatusOK, a
	}
	return http.StatusInternalServerError, map[string]any{
		"error":   wire.Errorf(wire.CodeInternal, "upgrade to %s failed, this agent serves on: %s", a.ToVersion, a.Error),
		"upgrade": a,
	}
}

// writeRaw answers on a connection taken from the HTTP server.
func writeRaw(w io.Writer, a resume.UpgradeAnswer) error {
	status, v := upgradeReply(a)
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	_, err := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(b), b)
	return err
}

// AnswerUpgradeCaller answers the host's upgrade call on its connection,
// carried across the exec to the new agent.
func AnswerUpgradeCaller(f *os.File, a resume.UpgradeAnswer) error {
	if c, err := net.FileConn(f); err == nil {
		defer c.Close()
		c.SetWriteDeadline(time.Now().Add(BodyTimeout))
		return writeRaw(c, a)
	}
	return writeRaw(f, a)
}
