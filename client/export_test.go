package client

// PendingCalls reports how many requests wait for their response, so a
// test can drop the connection while a call is in flight.
func PendingCalls(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}
