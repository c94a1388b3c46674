// Package client is the Go SDK of rayito-agent: it dials the agent's
// websocket, runs and attaches to streams (processes, terminals,
// directory watches, kernel cells), and keeps them flowing across dropped
// connections and VM resumes. Host calls (init, resume, health) need no
// websocket: see Host.
//
// One reader goroutine per connection decodes frames and routes them:
// responses to the calls waiting for them, data frames straight into the
// buffer of their handle's channel (checked to be in offset order), and
// events to their handle. Applications consume a handle's channels at
// their own pace; acknowledgements follow consumption, so an application
// that stops reading makes a block stream stop its process, not grow
// memory. When the connection drops (or the agent closes it with 4000
// after a resume) the client reconnects with backoff and reattaches every
// live handle from what it had received: a reader sees one unbroken
// stream, no byte missing, none repeated, and any data the agent dropped
// in between is reported as a *GapError at its place.
package client
