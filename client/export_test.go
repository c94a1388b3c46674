package client

// PendingCalls reports how many requests wait for their response, so a
// test can drop the connection while a call is in flight.
func PendingCalls(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Buffered reports how many bytes of a process's channel ("stdout",
// "stderr") arrived and wait to be consumed.
func Buffered(p *Process, channel string) int {
	for _, b := range p.h.bytes {
		if b != nil && b.name == channel {
			return b.buffered()
		}
	}
	return -1
}

// SendNoOpIDs makes c send its requests without op_ids, as a client
// before them did.
func SendNoOpIDs(c *Client) { c.noOpIDs = true }
