package client

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
)

// Exactly-once calls (protocol section 11.13). Every call that starts or
// changes something names its request with an op_id, where the agent
// takes them (its hello says op_ids). If the connection drops or a resume
// cuts it before the answer, the call sends the same request, with the
// same op_id and the agent instance it first went to, on the next
// connection: the agent answers with the first execution's outcome, or
// runs it if it never read it. So such a call succeeds across a resume
// as if nothing happened, and never runs twice; it fails only when the
// caller's context ends, the agent restarted meanwhile (a not_found
// naming the op_id: whether it ran is unknown), or the agent let its
// outcome go (CodeExpired: it ran).

// newOpPrefix is a client's op_id prefix: random, so that no two
// clients' ids meet.
func newOpPrefix() string {
	b := make([]byte, 12)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b) + "-"
}

// newOpID names a request: the client's prefix and a counter in base 36
// (at most 17 + 13 characters, within the protocol's 64).
func (c *Client) newOpID() string { return c.opPrefix + strconv.FormatUint(c.opSeq.Add(1), 36) }
