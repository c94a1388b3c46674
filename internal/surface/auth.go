package surface

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"sync"
)

// Why a request was refused, for the surface to say in its own format.
var (
	ErrNoToken    = errors.New("missing access token")
	ErrWrongToken = errors.New("wrong access token")
	// ErrNoTokenSet: the agent has no token, so nothing passes a check.
	ErrNoTokenSet = errors.New("the agent has no access token configured")
)

// Auth holds the agent's one access token. Comparisons are constant-time
// over hashes so neither the token nor its length leaks through timing.
// The token is never logged; it is kept only for WithToken.
type Auth struct {
	mu    sync.RWMutex
	hash  [sha256.Size]byte
	token string
	set   bool
	// finders are where the mounted surfaces' clients put the token
	// (Shown asks them all).
	finders []TokenFinder
}

// A TokenFinder returns the tokens a request presents in one surface's
// forms (a header, a query parameter), best first; a request passes if
// any of them is the agent's token.
type TokenFinder func(r *http.Request) []string

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

// IsSet reports whether a token is configured.
func (a *Auth) IsSet() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.set
}

// Valid reports whether token is the configured one.
func (a *Auth) Valid(token string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if !a.set {
		return false
	}
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], a.hash[:]) == 1
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

// Check says whether r presents the token in one of find's forms: nil,
// or ErrNoToken, ErrWrongToken or ErrNoTokenSet.
func (a *Auth) Check(r *http.Request, find TokenFinder) error {
	if !a.IsSet() {
		return ErrNoTokenSet
	}
	given := find(r)
	for _, t := range given {
		if a.Valid(t) {
			return nil
		}
	}
	if len(given) == 0 {
		return ErrNoToken
	}
	return ErrWrongToken
}

// Shown reports whether r presents the token in the form of any mounted
// surface. It decides only which connections count as a known client's
// when the agent is short of connections; each route still applies its
// own surface's rule.
func (a *Auth) Shown(r *http.Request) bool {
	a.mu.RLock()
	finders := a.finders
	a.mu.RUnlock()
	for _, f := range finders {
		if a.Check(r, f) == nil {
			return true
		}
	}
	return false
}

// addFinder makes Shown look where f does too.
func (a *Auth) addFinder(f TokenFinder) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finders = append(a.finders[:len(a.finders):len(a.finders)], f)
}
