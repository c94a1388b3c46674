package main

import "time"

// backoff spaces out restarts of a program that keeps dying: the delay
// doubles from min to max while runs stay shorter than stable, and a run
// that lasted stable or longer starts over at min.
type backoff struct {
	min, max, stable time.Duration
	cur              time.Duration
}

// next returns how long to wait before the next start, given how long the
// last run lasted.
func (b *backoff) next(ran time.Duration) time.Duration {
	if ran >= b.stable || b.cur == 0 {
		b.cur = b.min
		return b.cur
	}
	b.cur = min(b.cur*2, b.max)
	return b.cur
}
