package files

import (
	"fmt"
)

// Batch commits the files of one upload together. Commit first does, for
// every file, all that can fail short of the rename (sync, owner and mode,
// the target checked as the rename will find it), so a failure there
// commits none of them; only then does it rename them, in the order they
// were added. A rename can still fail after its check (another process
// put a file at an Exclusive path, or a directory in the way, in between):
// the files before it are then in place and the rest are not, and the
// error says how many were committed. A Batch is used by one goroutine;
// its zero value is empty.
type Batch struct {
	writers []*Writer
	// beforeRenames, for tests, runs between the checks and the renames.
	beforeRenames func()
}

// MaxBatch bounds the files of a batch: each is open (a temporary file)
// until the batch commits, so an upload of many small files must not run
// the agent out of descriptors.
const MaxBatch = 1000

// Add puts w in the batch. A second file for a path already in it is
// ErrInvalid (the upload would race with itself), a file beyond MaxBatch
// ErrTooMany; either way w is aborted.
func (b *Batch) Add(w *Writer) error {
	if len(b.writers) == MaxBatch {
		w.Abort()
		return newErr("write", w.Path(), ErrTooMany, errBatch)
	}
	for _, other := range b.writers {
		if other.Path() == w.Path() {
			w.Abort()
			return newErr("write", w.Path(), ErrInvalid, errTwice)
		}
	}
	b.writers = append(b.writers, w)
	return nil
}

// Commit puts every file in place, or on failure aborts what is not (see
// Batch). The batch is empty after.
func (b *Batch) Commit() ([]Committed, error) {
	ws := b.writers
	b.writers = nil
	for _, w := range ws {
		if err := w.ready(); err != nil {
			abort(ws)
			return nil, err
		}
	}
	if b.beforeRenames != nil {
		b.beforeRenames()
	}
	out := make([]Committed, 0, len(ws))
	for i, w := range ws {
		c, err := w.place()
		if err != nil {
			abort(ws[i+1:])
			if i > 0 {
				err = fmt.Errorf("%w; committed before it: %d of the %d files, in the order sent; the others are not", err, i, len(ws))
			}
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Abort removes the temporary files of what the batch holds; the targets
// keep their content. The batch is empty after.
func (b *Batch) Abort() {
	abort(b.writers)
	b.writers = nil
}

func abort(ws []*Writer) {
	for _, w := range ws {
		w.Abort()
	}
}
