package main

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second, stable: 10 * time.Second}
	short := time.Millisecond
	steps := []struct {
		ran  time.Duration
		want time.Duration
	}{
		{short, 100 * time.Millisecond}, // first restart
		{short, 200 * time.Millisecond},
		{short, 400 * time.Millisecond},
		{short, 800 * time.Millisecond},
		{short, time.Second}, // capped
		{short, time.Second},
		{10 * time.Second, 100 * time.Millisecond}, // a stable run resets
		{short, 200 * time.Millisecond},
	}
	for i, s := range steps {
		if got := b.next(s.ran); got != s.want {
			t.Fatalf("step %d: next(%s) = %s, want %s", i, s.ran, got, s.want)
		}
	}
}
