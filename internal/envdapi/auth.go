package envdapi

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Tokens is the agent's one access token; endpoint.Auth implements it.
type Tokens interface {
	IsSet() bool
	Valid(token string) bool
	WithToken(f func(token string) bool) bool
}

// tokenHeader is where the e2b SDK sends the token (never as a bearer).
const tokenHeader = "X-Access-Token"

var (
	errNoToken      = errors.New("missing access token: send it in the X-Access-Token header")
	errWrongToken   = errors.New("wrong access token")
	errNoTokenSet   = errors.New("the agent has no access token configured, so the envd API refuses every request; configure a token, or start the agent with --envd-open (unsafe)")
	errBadBasicUser = errors.New("the Authorization header must be Basic base64(\"user:\")")
)

// authorize decides whether a request may use the API. In open mode every
// request may; otherwise the agent's token must come in X-Access-Token,
// or, where signed is set (/files), as a valid URL signature instead.
func (s *Server) authorize(r *http.Request, signed bool) error {
	if s.cfg.Open {
		return nil
	}
	if !s.cfg.Auth.IsSet() {
		return errNoTokenSet
	}
	if tok := r.Header.Get(tokenHeader); tok != "" {
		if s.cfg.Auth.Valid(tok) {
			return nil
		}
		return errWrongToken
	}
	q := r.URL.Query()
	if !signed || !q.Has("signature") {
		return errNoToken
	}
	op := opRead
	if r.Method == http.MethodPost {
		op = opWrite
	}
	var err error
	s.cfg.Auth.WithToken(func(token string) bool {
		err = checkSignature(token, q.Get("path"), op, q.Get("username"), q.Get("signature"), q.Get("signature_expiration"), time.Now())
		return err == nil
	})
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
