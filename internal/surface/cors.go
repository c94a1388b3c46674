package surface

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	connectcors "connectrpc.com/cors"
	"github.com/coder/websocket"
	"github.com/rs/cors"
)

// Origins is which web pages may call the agent from a browser: CORS on
// every route a page may call, and the origin check of every websocket
// upgrade. The default is any origin, as envd's: every route but the
// public ones needs the token anyway, and credentials (cookies) are never
// allowed, so a page gets nothing it could not get by sending the token
// from anywhere else. A list narrows it to those pages.
type Origins struct {
	list []string // nil: any origin
}

// AnyOrigin is the default policy.
var AnyOrigin = Origins{}

// ParseOrigins reads --allowed-origins: "*" (or nothing) for any origin,
// else a comma list of origins such as https://ide.example.com or
// http://127.0.0.1:8080, where one * may stand for part of the host
// (https://*.example.com).
func ParseOrigins(s string) (Origins, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "*" {
		return AnyOrigin, nil
	}
	var o Origins
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimRight(strings.TrimSpace(part), "/")
		if part == "*" {
			return AnyOrigin, nil
		}
		u, err := url.Parse(part)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return Origins{}, fmt.Errorf("allowed origin %q: want scheme://host[:port], such as https://ide.example.com", part)
		}
		if strings.Count(part, "*") > 1 {
			return Origins{}, fmt.Errorf("allowed origin %q: at most one *", part)
		}
		o.list = append(o.list, strings.ToLower(part))
	}
	return o, nil
}

// Any reports whether every origin is allowed.
func (o Origins) Any() bool { return o.list == nil }

func (o Origins) String() string {
	if o.Any() {
		return "*"
	}
	return strings.Join(o.list, ",")
}

// AcceptOptions applies the policy to a websocket upgrade: a browser's
// upgrade from a page the policy refuses is answered 403 (clients that
// send no Origin, as SDKs outside a browser, are not affected, nor is a
// page the agent's own host served).
func (o Origins) AcceptOptions(opts websocket.AcceptOptions) *websocket.AcceptOptions {
	if o.Any() {
		opts.InsecureSkipVerify = true
	} else {
		opts.OriginPatterns = o.list
	}
	return &opts
}

// handler answers preflights and adds CORS headers to what h answers.
func (o Origins) handler(h http.Handler) http.Handler {
	origins := o.list
	if o.Any() {
		origins = []string{"*"}
	}
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodHead, http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete},
		// Any request header: envd's SDK and jupyterlab send their own
		// (Connect's, E2B's, Authorization).
		AllowedHeaders: []string{"*"},
		ExposedHeaders: append(connectcors.ExposedHeaders(),
			"Connect-Protocol-Version", "Location", "Cache-Control", "X-Content-Type-Options", "Content-Disposition", "Retry-After"),
		AllowCredentials: false,
		MaxAge:           7200,
	}).Handler(h)
}
