package freezetest

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// counterLines checks a stream of lines prefix+1, prefix+2, ... (or from
// another first number): every number exactly once, in order. A line may
// end in "\r\n" (a terminal's output).
type counterLines struct {
	prefix string

	mu      sync.Mutex
	next    int // the number the next line must have
	partial []byte
	err     error
}

func newCounterLines(prefix string, first int) *counterLines {
	return &counterLines{prefix: prefix, next: first}
}

// Write takes the next chunk of the stream, split anywhere.
func (c *counterLines) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSuffix(c.partial[:i], []byte("\r"))
		if want := c.prefix + strconv.Itoa(c.next); string(line) != want && c.err == nil {
			c.err = fmt.Errorf("line %q where %q was due", line, want)
		}
		c.next++
		c.partial = c.partial[i+1:]
	}
	return len(p), nil
}

// last is the last number seen.
func (c *counterLines) last() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next - 1
}

// check returns the first problem seen. An unfinished last line (the
// program killed mid-line) must be the start of the line that was due.
func (c *counterLines) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if due := c.prefix + strconv.Itoa(c.next); !bytes.HasPrefix([]byte(due), c.partial) {
		return fmt.Errorf("unfinished last line %q where %q was due", c.partial, due)
	}
	return nil
}

// drain copies r into c to its end; gaps are errors here, since nothing
// may be dropped.
func (c *counterLines) drain(r io.Reader) error {
	_, err := io.Copy(c, r)
	return err
}
