package freezetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// fileMaker creates files (and now and then a directory to put the next
// ones in) under a root until stopped, remembering every path.
type fileMaker struct {
	root string
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	created []string
	err     error
}

// makeFiles starts creating an entry every interval.
func makeFiles(root string, interval time.Duration) *fileMaker {
	m := &fileMaker{root: root, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run(interval)
	return m
}

func (m *fileMaker) run(interval time.Duration) {
	defer close(m.done)
	dirs := []string{m.root}
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		var err error
		var path string
		if n%25 == 0 {
			path = filepath.Join(dirs[len(dirs)-1], fmt.Sprintf("d%04d", n))
			err = os.Mkdir(path, 0o755)
			dirs = append(dirs, path)
		} else {
			path = filepath.Join(dirs[n%len(dirs)], fmt.Sprintf("f%04d", n))
			err = os.WriteFile(path, nil, 0o644)
		}
		m.mu.Lock()
		if err != nil {
			m.err = err
		} else {
			m.created = append(m.created, path)
		}
		m.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// paths returns what was created so far.
func (m *fileMaker) paths() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.created...)
}

// finish stops making files and returns every path made.
func (m *fileMaker) finish() ([]string, error) {
	m.once.Do(func() { close(m.stop) })
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.created, m.err
}

// fsLog collects a watch's events, checking their seqs run without holes.
type fsLog struct {
	mu      sync.Mutex
	creates map[string]int
	events  int
	err     error
	done    chan struct{}
}

// follow reads w until its end, in a goroutine.
func follow(ctx context.Context, w *client.Watch) *fsLog {
	l := &fsLog{creates: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		var seq uint64
		for {
			ev, err := w.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			l.mu.Lock()
			switch {
			case err != nil:
				l.err = err // a gap included: nothing may be dropped
			case ev.Seq != seq+1:
				l.err = fmt.Errorf("event seq %d after %d", ev.Seq, seq)
			case ev.Op == "overflow":
				l.err = fmt.Errorf("overflow event: %+v", ev)
			}
			if err == nil {
				seq = ev.Seq
				l.events++
				if ev.Op == "create" {
					l.creates[ev.Path]++
				}
			}
			failed := l.err != nil
			l.mu.Unlock()
			if failed {
				return
			}
		}
	}()
	return l
}

// seen counts the create events of path so far.
func (l *fsLog) seen(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.creates[path]
}

// failure is the first problem seen.
func (l *fsLog) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// check says whether every path made got exactly one create event, and
// nothing else did.
func (l *fsLog) check(made []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	want := map[string]bool{}
	for _, p := range made {
		want[p] = true
		if n := l.creates[p]; n != 1 {
			return fmt.Errorf("%d create events for %s, want 1 (of %d entries made)", n, p, len(made))
		}
	}
	for p, n := range l.creates {
		if !want[p] {
			return fmt.Errorf("%d create events for %s, which the test did not make", n, p)
		}
	}
	return nil
}
