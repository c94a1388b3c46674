package surface

import (
	"net/http"
	"strings"
)

// FromHeader finds the token as the whole value of any of the headers.
func FromHeader(names ...string) TokenFinder {
	return func(r *http.Request) []string {
		var out []string
		for _, n := range names {
			if v := r.Header.Get(n); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
}

// FromAuthorization finds the token in an Authorization header of one of
// the schemes ("Bearer", Jupyter's "token"), case-insensitively. A header
// of another scheme presents no token but is not nothing either: it
// yields "", which no token equals, so that FirstOf does not look past
// it (a bad header is not rescued by a query parameter).
func FromAuthorization(schemes ...string) TokenFinder {
	return func(r *http.Request) []string {
		h := r.Header.Get("Authorization")
		if h == "" {
			return nil
		}
		scheme, tok, _ := strings.Cut(h, " ")
		for _, s := range schemes {
			if strings.EqualFold(scheme, s) {
				return []string{strings.TrimSpace(tok)}
			}
		}
		return []string{""}
	}
}

// FromQuery finds the token in a query parameter (browsers cannot set a
// websocket's headers).
func FromQuery(name string) TokenFinder {
	return func(r *http.Request) []string {
		if q := r.URL.Query(); q.Has(name) {
			return []string{q.Get(name)}
		}
		return nil
	}
}

// FirstOf looks in each form in turn and takes the first that holds
// anything: a header wins over a query parameter.
func FirstOf(fs ...TokenFinder) TokenFinder {
	return func(r *http.Request) []string {
		for _, f := range fs {
			if t := f(r); len(t) > 0 {
				return t
			}
		}
		return nil
	}
}

// AnyOf accepts the token in any of the forms.
func AnyOf(fs ...TokenFinder) TokenFinder {
	return func(r *http.Request) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f(r)...)
		}
		return out
	}
}

// AgentTokens is where the agent's own clients (the native protocol, the
// host) put the token: an Authorization header of scheme Bearer, or an
// access_token query parameter (browsers cannot set a websocket's headers).
var AgentTokens = FirstOf(FromAuthorization("Bearer"), FromQuery("access_token"))
