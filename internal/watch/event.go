package watch

import (
	"encoding/json"
	"fmt"
	"path/filepath"
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

// ParseOp is the Op named name ("create", ...), false for none.
func ParseOp(name string) (Op, bool) {
	for o := OpCreate; o <= OpOverflow; o++ {
		if o.String() == name {
			return o, true
		}
	}
	return 0, false
}

// Event is one change a watch reports: its stream's events hold them
// encoded by Encode, and every surface reads them with DecodeEvent (the
// native protocol sends them inside its envelope, `{"event": "fs",
// "stream", "seq", "op", "path", "dir"}`).
type Event struct {
	Op   Op
	Path string // under the watched directory as the client named it
	Dir  bool   // the path is a directory
}

// Encode is the event as a watch stream holds it:
// {"op":"create","path":"/w/a","dir":false}.
func (e Event) Encode() []byte {
	quoted, _ := json.Marshal(e.Path) // a string always encodes
	b := make([]byte, 0, len(quoted)+40)
	b = append(b, `{"op":"`...)
	b = append(b, e.Op.String()...)
	b = append(b, `","path":`...)
	b = append(b, quoted...)
	b = append(b, `,"dir":`...)
	b = strconv.AppendBool(b, e.Dir)
	return append(b, '}')
}

// DecodeEvent reads an event of a watch stream.
func DecodeEvent(b []byte) (Event, error) {
	var raw struct {
		Op   string `json:"op"`
		Path string `json:"path"`
		Dir  bool   `json:"dir"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Event{}, fmt.Errorf("watch: event: %w", err)
	}
	op, ok := ParseOp(raw.Op)
	if !ok {
		return Event{}, fmt.Errorf("watch: event with unknown op %q", raw.Op)
	}
	return Event{Op: op, Path: raw.Path, Dir: raw.Dir}, nil
}

// emit appends one event to the watch's stream, naming the path as the
// client named the watched directory.
func (w *watch) emit(op Op, real string, dir bool) {
	path := w.shown(real)
	if w.hideTemp != nil {
		// The agent's atomic writes (a temporary file renamed over the
		// target) are reported as what a client asked for: the target
		// created, then written; the temporary file's own events are left
		// out. The commit's rename is the temporary file's last event,
		// and the target's create follows it.
		committed := w.committed
		w.committed = ""
		if w.hideTemp(path) {
			if op == OpRename {
				w.committed = filepath.Dir(path)
			}
			return
		}
		if op == OpCreate && committed == filepath.Dir(path) {
			if !w.append(Event{Op: op, Path: path, Dir: dir}) {
				return
			}
			op = OpWrite
		}
	}
	w.append(Event{Op: op, Path: path, Dir: dir})
}

// append adds one event to the watch's stream, false if the stream ended.
// If the append made the buffer drop events nobody had read, an overflow
// event follows, unless one is still waiting unread in the buffer.
func (w *watch) append(e Event) bool {
	ev := e.Encode()
	if _, err := w.log.Append(func(uint64) []byte { return ev }); err != nil {
		return false // the stream ended
	}
	st := w.log.Stats()
	if st.Lost == w.lostSeen {
		return true
	}
	w.lostSeen = st.Lost
	if w.overflowSeq > st.Start && w.overflowSeq > st.Acked {
		return true
	}
	w.overflow()
	return true
}

// overflow appends an overflow event naming the watched directory.
func (w *watch) overflow() {
	ev := Event{Op: OpOverflow, Path: w.display, Dir: true}.Encode()
	seq, err := w.log.Append(func(uint64) []byte { return ev })
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
