// Package surface is the layer every wire format of the agent shares: one
// HTTP server on every listener, to which each surface (the native
// protocol, the host API, envd's API, jupyter_server's, the code
// interpreter's) mounts its routes.
//
// The layer owns what must be the same on every surface: the access token
// and the forms each surface's clients present it in (auth.go), which web
// pages may call (cors.go), the connection limit with its reserve for the
// host's routes and the eviction of stale connections (conns.go), a body
// drained before an early answer (drain.go), error bodies and the one
// table of HTTP statuses for protocol error codes (json.go, status.go),
// and the one registry of long-lived connections, which a resume cuts
// and a shutdown closes (cuts.go). A surface translates
// its wire format onto the managers and holds no logic of its own.
package surface
