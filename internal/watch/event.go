package watch

import (
	"encoding/json"
	"strconv"
)

// Op is what happened to a path, as named in the `op` field of fs events.
type Op uint8

const (
	OpCreate Op = iota + 1
	OpWrite
	OpRemove
	OpRename
	OpChmod
	// OpOverflow says events were lost; the client should re-list the tree.
	OpOverflow
)

func (o Op) String() string {
	switch o {
	case OpCreate:
		return "create"
	case OpWrite:
		return "write"
	case OpRemove:
		return "remove"
	case OpRename:
		return "rename"
	case OpChmod:
		return "chmod"
	case OpOverflow:
		return "overflow"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// encodeEvent returns the build callback for stream.Log.Append. The JSON is
// assembled before the stream's lock is taken; only the seq goes in under it.
func encodeEvent(id uint64, op Op, path string, dir bool) func(seq uint64) []byte {
	head := strconv.AppendUint([]byte(`{"event":"fs","stream":`), id, 10)
	head = append(head, `,"seq":`...)
	quoted, _ := json.Marshal(path) // a string always encodes
	tail := make([]byte, 0, len(quoted)+48)
	tail = append(tail, `,"op":"`...)
	tail = append(tail, op.String()...)
	tail = append(tail, `","path":`...)
	tail = append(tail, quoted...)
	tail = append(tail, `,"dir":`...)
	tail = strconv.AppendBool(tail, dir)
	tail = append(tail, '}')
	return func(seq uint64) []byte {
		b := make([]byte, 0, len(head)+20+len(tail))
		b = append(b, head...)
		b = strconv.AppendUint(b, seq, 10)
		return append(b, tail...)
	}
}

// emit appends one event to the watch's stream, naming the path as the
// client named the watched directory. If the append made the buffer drop
// events nobody had read, an overflow event follows, unless one is still
// waiting unread in the buffer.
func (w *watch) emit(op Op, real string, dir bool) {
	if _, err := w.log.Append(encodeEvent(w.s.ID, op, w.shown(real), dir)); err != nil {
		return // the stream ended
	}
	st := w.log.Stats()
	if st.Lost == w.lostSeen {
		return
	}
	w.lostSeen = st.Lost
	if w.overflowSeq > st.Start && w.overflowSeq > st.Acked {
		return
	}
	w.overflow()
}

// overflow appends an overflow event naming the watched directory.
func (w *watch) overflow() {
	seq, err := w.log.Append(encodeEvent(w.s.ID, OpOverflow, w.display, true))
	if err != nil {
		return
	}
	w.overflowSeq = seq
	w.lostSeen = w.log.Stats().Lost
}

// shown maps a resolved path inside the watched tree to the same path under
// the directory the client asked for (they differ when it held a symlink).
func (w *watch) shown(real string) string {
	switch {
	case w.root == w.display:
		return real
	case real == w.root:
		return w.display
	case w.root == "/":
		return w.display + real
	default:
		return w.display + real[len(w.root):]
	}
}
