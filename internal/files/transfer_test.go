package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

const waitLong = 30 * time.Second

// receive reads an attachment to its end, acknowledging as it goes, and
// returns the bytes of the data channel, the events and the end.
func receive(t testing.TB, a *stream.Attachment) ([]byte, [][]byte, stream.Item) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var data []byte
	var events [][]byte
	for {
		item, err := a.Next(ctx, nil, 256<<10)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		switch item.Kind {
		case stream.ItemData:
			if item.Offset != uint64(len(data)) {
				t.Fatalf("data at %d after %d bytes", item.Offset, len(data))
			}
			data = append(data, item.Data...)
			a.Ack(map[string]uint64{item.Channel: uint64(len(data))})
		case stream.ItemEvent:
			events = append(events, item.Data)
			a.Ack(map[string]uint64{item.Channel: uint64(len(events))})
		case stream.ItemGap:
			t.Fatalf("gap %+v", item)
		case stream.ItemEnd:
			a.Close()
			return data, events, item
		}
	}
}

func randomFile(t testing.TB, path string, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadStream(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(root, "f")
			content := randomFile(t, p, 1<<20+17)
			cases := []struct {
				name   string
				o      ReadOptions
				lo, hi int
			}{
				{"whole", ReadOptions{}, 0, len(content)},
				{"offset", ReadOptions{Offset: 300 << 10}, 300 << 10, len(content)},
				{"range", ReadOptions{Offset: 5, Length: 1000}, 5, 1005},
				{"length past the end", ReadOptions{Offset: 10, Length: 10 << 20}, 10, len(content)},
				{"at the end", ReadOptions{Offset: int64(len(content))}, len(content), len(content)},
				{"small buffer", ReadOptions{Buffer: 4096}, 0, len(content)},
			}
			for _, c := range cases {
				tr, err := m.ReadStream("", p, c.o)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if tr.Size != int64(c.hi-c.lo) || tr.Stream.Kind != KindRead || tr.Path != p {
					t.Fatalf("%s: %+v", c.name, tr)
				}
				a, err := tr.Stream.Attach(nil, stream.DefaultWindow)
				if err != nil {
					t.Fatal(err)
				}
				data, _, end := receive(t, a)
				if !bytes.Equal(data, content[c.lo:c.hi]) {
					t.Fatalf("%s: %d bytes differ from the file's [%d, %d)", c.name, len(data), c.lo, c.hi)
				}
				if end.End.Reason != stream.ReasonDone || end.End.Extra["size"] != int64(c.hi-c.lo) {
					t.Fatalf("%s: end %+v", c.name, end.End)
				}
			}
			_, err := m.ReadStream("", p, ReadOptions{Offset: int64(len(content)) + 1})
			wantKind(t, err, ErrInvalid)
			_, err = m.ReadStream("", p, ReadOptions{Length: -1})
			wantKind(t, err, ErrInvalid)
			_, err = m.ReadStream("", root, ReadOptions{})
			wantKind(t, err, ErrIsDir)
			_, err = m.ReadStream("", filepath.Join(root, "nope"), ReadOptions{})
			wantKind(t, err, ErrNotFound)
		})
	}
}

// TestReadStreamVirtualFile: a /proc file says size 0 but is read to its
// end.
func TestReadStreamVirtualFile(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	tr, err := m.ReadStream("", "/proc/self/status", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Size != -1 {
		t.Fatalf("size %d, want -1 (unknown)", tr.Size)
	}
	a, _ := tr.Stream.Attach(nil, 0)
	data, _, end := receive(t, a)
	if !bytes.Contains(data, []byte("Umask:")) || end.End.Reason != stream.ReasonDone {
		t.Fatalf("read %q, end %+v", data, end.End)
	}
	_, err = m.ReadStream("", "/dev/zero", ReadOptions{})
	wantKind(t, err, ErrNotRegular)
}

// TestReadStreamShrinks: a file that shrinks while it is read ends the
// stream with ErrChanged after what could be read.
func TestReadStreamShrinks(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	p := filepath.Join(t.TempDir(), "f")
	randomFile(t, p, 8<<20)
	tr, err := m.ReadStream("", p, ReadOptions{Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// The log holds 1 MiB and nobody reads yet: the reader waits.
	if err := os.Truncate(p, 2<<20); err != nil {
		t.Fatal(err)
	}
	a, _ := tr.Stream.Attach(nil, stream.DefaultWindow)
	data, _, end := receive(t, a)
	if end.End.Reason != stream.ReasonError || len(data) != 2<<20 {
		t.Fatalf("got %d bytes and %+v", len(data), end.End)
	}
	if end.End.Extra["code"] != "conflict" { // the file changed while read
		t.Fatalf("end without the protocol code of the error: %+v", end.End)
	}
}

// TestReadStreamAbandoned: with no client past the grace, the download
// stops instead of reading the rest of the file for nobody.
func TestReadStreamAbandoned(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	p := filepath.Join(t.TempDir(), "f")
	randomFile(t, p, 16<<20)
	tr, err := m.ReadStream("", p, ReadOptions{Buffer: 1 << 20, Grace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Stream.Done():
	case <-time.After(waitLong):
		t.Fatal("download not abandoned")
	}
	if e := tr.Stream.Ended(); e.Reason != stream.ReasonError || tr.Stream.Cursors()["data"] >= 16<<20 {
		t.Fatalf("end %+v at %v", e, tr.Stream.Cursors())
	}
}

// upload sends content in chunks as owner, closes the input and returns
// the end.
func upload(t testing.TB, m *Manager, path string, o UploadOptions, chunks ...[]byte) (stream.Item, [][]byte) {
	t.Helper()
	owner := new(int)
	tr, err := m.WriteStream("", path, o, owner)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tr.Stream.Attach(nil, stream.DefaultWindow)
	if err != nil {
		t.Fatal(err)
	}
	up := tr.Stream.Control.(*Upload)
	var sent int
	for _, c := range chunks {
		// Stay within the window: wait for progress like a client does.
		for {
			_, written := up.TakeOver(owner)
			if sent+len(c)-int(written) <= UploadWindow {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if err := up.WriteInputFrom(owner, c); err != nil {
			t.Fatal(err)
		}
		sent += len(c)
	}
	if err := up.CloseInput(); err != nil {
		t.Fatal(err)
	}
	_, events, end := receive(t, a)
	return end, events
}

func TestUpload(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	for name, root := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(root, "up")
			content := make([]byte, 9<<20+5)
			rand.New(rand.NewSource(1)).Read(content)
			var chunks [][]byte
			for off := 0; off < len(content); off += 256 << 10 {
				chunks = append(chunks, content[off:min(off+256<<10, len(content))])
			}
			end, events := upload(t, m, p, UploadOptions{}, chunks...)
			sum := sha256.Sum256(content)
			e := end.End
			if e.Reason != stream.ReasonDone || e.Extra["size"] != int64(len(content)) || e.Extra["sha256"] != hex.EncodeToString(sum[:]) || e.Extra["created"] != true {
				t.Fatalf("end %+v", e)
			}
			got, _ := os.ReadFile(p)
			if !bytes.Equal(got, content) {
				t.Fatal("file differs from what was sent")
			}
			var last struct {
				Written int64 `json:"written"`
			}
			if len(events) == 0 || json.Unmarshal(events[len(events)-1], &last) != nil || last.Written != int64(len(content)) {
				t.Fatalf("%d progress events, last %s", len(events), events[len(events)-1])
			}
			if left := temps(t, root); len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

func TestUploadInputErrors(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	writeFile(t, p, "old")
	owner, other := new(int), new(int)
	tr, err := m.WriteStream("", p, UploadOptions{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	up := tr.Stream.Control.(*Upload)
	wantKind(t, up.WriteInputFrom(other, []byte("x")), ErrNotOwner)
	if err := up.WriteInputFrom(owner, []byte("ab")); err != nil {
		t.Fatal(err)
	}
	// A reattaching connection takes over; the old one is refused.
	if received, _ := up.TakeOver(other); received != 2 {
		t.Fatalf("received %d, want 2", received)
	}
	wantKind(t, up.WriteInputFrom(owner, []byte("x")), ErrNotOwner)
	// Input beyond the window fails the upload: the file would miss it.
	wantKind(t, up.WriteInputFrom(other, make([]byte, UploadWindow+1)), ErrWindow)
	<-tr.Stream.Done()
	if e := tr.Stream.Ended(); e.Reason != stream.ReasonError {
		t.Fatalf("end %+v", e)
	}
	wantKind(t, up.CloseInput(), ErrWindow)
	if readFile(t, p) != "old" || len(temps(t, dir)) != 0 {
		t.Fatalf("old file %q, temporary files %v", readFile(t, p), temps(t, dir))
	}

	tr, _ = m.WriteStream("", p, UploadOptions{}, owner)
	up = tr.Stream.Control.(*Upload)
	up.CloseInput()
	wantKind(t, up.CloseInput(), ErrInputClosed)
	wantKind(t, up.WriteInputFrom(owner, []byte("x")), ErrInputClosed)
	<-tr.Stream.Done()
	if readFile(t, p) != "" {
		t.Fatal("an empty upload did not empty the file")
	}
}

// TestUploadAbandoned: a client that goes away mid-upload and does not
// come back within the grace leaves the old file and no temporary file.
func TestUploadAbandoned(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	writeFile(t, p, "old")
	owner := new(int)
	tr, err := m.WriteStream("", p, UploadOptions{Grace: 100 * time.Millisecond}, owner)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tr.Stream.Attach(nil, stream.DefaultWindow)
	tr.Stream.Control.(*Upload).WriteInputFrom(owner, []byte("half of it"))
	a.Close() // the connection is cut
	select {
	case <-tr.Stream.Done():
	case <-time.After(waitLong):
		t.Fatal("upload not abandoned")
	}
	if e := tr.Stream.Ended(); e.Reason != stream.ReasonError {
		t.Fatalf("end %+v", e)
	}
	if readFile(t, p) != "old" || len(temps(t, dir)) != 0 {
		t.Fatalf("old file %q, temporary files %v", readFile(t, p), temps(t, dir))
	}
}

// TestCloseEndsTransfers: closing the manager ends uploads (their
// temporary files go) and downloads.
func TestCloseEndsTransfers(t *testing.T) {
	t.Parallel()
	reg := stream.NewRegistry(0)
	defer reg.Close()
	m, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	randomFile(t, filepath.Join(dir, "big"), 8<<20)
	down, err := m.ReadStream("", filepath.Join(dir, "big"), ReadOptions{Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	owner := new(int)
	up, err := m.WriteStream("", filepath.Join(dir, "up"), UploadOptions{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	up.Stream.Control.(*Upload).WriteInputFrom(owner, []byte("partial"))
	m.Close()
	for _, st := range []*stream.Stream{down.Stream, up.Stream} {
		if e := st.Ended(); e == nil || e.Reason != stream.ReasonError {
			t.Fatalf("stream %s after Close: %+v", st.Kind, e)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "up")); err == nil || len(temps(t, dir)) != 0 {
		t.Fatalf("upload left %v", temps(t, dir))
	}
	_, err = m.ReadStream("", filepath.Join(dir, "big"), ReadOptions{})
	wantKind(t, err, ErrClosed)
}

// TestUploadAbandonedByOwner: the owner detaching gives the upload up at
// once; anyone else detaching changes nothing.
func TestUploadAbandonedByOwner(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	owner, other := new(int), new(int)
	tr, err := m.WriteStream("", filepath.Join(dir, "f"), UploadOptions{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	up := tr.Stream.Control.(*Upload)
	up.WriteInputFrom(owner, []byte("partial"))
	up.Abandon(other)
	if tr.Stream.Ended() != nil {
		t.Fatal("a bystander's detach ended the upload")
	}
	up.Abandon(owner)
	select {
	case <-tr.Stream.Done():
	case <-time.After(waitLong):
		t.Fatal("upload not abandoned")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left %v", entries)
	}
}

// TestUploadCloseAtOffset: an end of input that names the file's length
// waits for the input before it, as one sent on a new connection after a
// cut overtakes the input sent again there: the file gets every byte.
// The same end again is a no-op, one below what was received a conflict,
// and bytes past the declared end are not the file's.
func TestUploadCloseAtOffset(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	owner := new(int)
	tr, err := m.WriteStream("", p, UploadOptions{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	up := tr.Stream.Control.(*Upload)
	if err := up.WriteInputAt(owner, 0, []byte("73")); err != nil {
		t.Fatal(err)
	}
	if err := up.CloseInputAt(3); err != nil {
		t.Fatalf("an end of input ahead of its last byte: %v", err)
	}
	if err := up.CloseInputAt(3); err != nil {
		t.Fatalf("the same end again: %v", err)
	}
	wantKind(t, up.CloseInputAt(1), ErrInputEOF)
	select {
	case <-tr.Stream.Done():
		t.Fatalf("committed before the input the end waits for: %+v", tr.Stream.Ended())
	case <-time.After(100 * time.Millisecond):
	}
	if err := up.WriteInputAt(owner, 2, []byte("7 and more")); err != nil {
		t.Fatal(err)
	}
	<-tr.Stream.Done()
	if e := tr.Stream.Ended(); e.Reason != stream.ReasonDone || e.Extra["size"] != int64(3) || readFile(t, p) != "737" {
		t.Fatalf("end %+v, file %q", e, readFile(t, p))
	}
}
