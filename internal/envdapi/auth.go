package envdapi

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/rayito/rayito-agent/internal/surface"
)

// Tokens is where the e2b SDK sends the token: X-Access-Token, never as
// a bearer (its Authorization header names the user).
var Tokens = surface.FromHeader("X-Access-Token")

var (
	errNoToken      = errors.New("missing access token: send it in the X-Access-Token header")
	errWrongToken   = errors.New("wrong access token")
	errNoTokenSet   = errors.New("the agent has no access token configured, so the envd API refuses every request; configure a token, or start the agent with --envd-open (unsafe)")
	errBadBasicUser = errors.New("the Authorization header must be Basic base64(\"user:\")")
)

// refuse answers a request without the token in envd's terms: /files in
// its JSON shape, the RPCs with HTTP 401 and a Connect error body (unary
// clients read the body, stream clients the status, and both get
// unauthenticated).
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, surface.ErrNoToken):
		err = errNoToken
	case errors.Is(err, surface.ErrWrongToken):
		err = errWrongToken
	case errors.Is(err, surface.ErrNoTokenSet):
		err = errNoTokenSet
	}
	if r.URL.Path == "/files" {
		writeFilesError(w, http.StatusUnauthorized, err.Error())
		return
	}
	writeUnauthenticated(w, err)
}

// signedURL lets a /files request in without the token when its URL is
// signed with it (the e2b SDK's download and upload URLs).
func (s *Server) signedURL(r *http.Request) error {
	q := r.URL.Query()
	if !q.Has("signature") {
		return surface.ErrNoToken
	}
	op := opRead
	if r.Method == http.MethodPost {
		op = opWrite
	}
	var err error
	if s.cfg.Auth.WithToken(func(token string) bool {
		err = checkSignature(token, q.Get("path"), op, q.Get("username"), q.Get("signature"), q.Get("signature_expiration"), time.Now())
		return err == nil
	}) {
		return nil
	}
	if err == nil {
		err = surface.ErrNoTokenSet // nothing to check the signature against
	}
	return err
}

// basicUser reads the user the SDK names in "Authorization: Basic
// base64(user:)"; "" (the default user) without a Basic header. Other
// schemes, which a proxy may add, name no user.
func basicUser(h http.Header) (string, error) {
	scheme, enc, _ := strings.Cut(h.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Basic") {
		return "", nil
	}
	enc = strings.TrimSpace(enc)
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || enc == "" {
		return "", errBadBasicUser
	}
	user, _, _ := strings.Cut(string(dec), ":")
	return user, nil
}
