package endpoint

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
)

// Auth holds the access token. Comparisons are constant-time over hashes
// so neither the token nor its length leaks through timing. The token is
// never logged; it is kept only for WithToken.
type Auth struct {
	mu    sync.RWMutex
	hash  [sha256.Size]byte
	token string
	set   bool
}

// NewAuth returns an Auth with the token set, or none if token is empty.
func NewAuth(token string) *Auth {
	a := &Auth{}
	if token != "" {
		a.Set(token)
	}
	return a
}

// Set replaces the token.
func (a *Auth) Set(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hash, a.token, a.set = sha256.Sum256([]byte(token)), token, true
}

// WithToken runs f with the token and returns its answer, or false when no
// token is set. It is for checks that derive a value from the token (E2B's
// signed file URLs hash it with the path); f must compare in constant time
// and must not keep or log the token.
func (a *Auth) WithToken(f func(token string) bool) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.set && f(a.token)
}

// IsSet reports whether a token is configured.
func (a *Auth) IsSet() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.set
}

// Check reports whether the request carries the token, as a bearer header
// or an access_token query parameter (browsers cannot set websocket
// headers). Without a configured token nothing passes.
func (a *Auth) Check(r *http.Request) bool {
	given, ok := requestToken(r)
	return ok && a.Valid(given)
}

// Valid reports whether token is the configured one. Other surfaces (each
// with its own way of carrying the token) extract it and ask here, so the
// agent has one token and one constant-time comparison.
func (a *Auth) Valid(token string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if !a.set {
		return false
	}
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], a.hash[:]) == 1
}

// Shown reports whether the request carries the token in any form one of
// the agent's surfaces accepts: the native Bearer header and access_token
// parameter, envd's and E2B's X-Access-Token and E2B-Traffic-Access-Token
// headers, Jupyter's "Authorization: token" header and token parameter.
// It decides only which connections count as a known client's when the
// agent is short of connections; each surface still applies its own rule.
func (a *Auth) Shown(r *http.Request) bool {
	if a.Check(r) {
		return true
	}
	for _, name := range []string{"X-Access-Token", "E2B-Traffic-Access-Token"} {
		if v := r.Header.Get(name); v != "" && a.Valid(v) {
			return true
		}
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "token") && a.Valid(strings.TrimSpace(tok)) {
		return true
	}
	q := r.URL.Query()
	return q.Has("token") && a.Valid(q.Get("token"))
}

func requestToken(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok), true
		}
		return "", false
	}
	if q := r.URL.Query(); q.Has("access_token") {
		return q.Get("access_token"), true
	}
	return "", false
}
