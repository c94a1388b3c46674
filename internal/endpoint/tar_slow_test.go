package endpoint

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSlowTarReadersAsAnotherUser: 2,000 downloads of a directory as
// tar as another user, by eight clients, stop reading. The agent keeps serving with a
// bounded number of OS threads (a download holds none while it waits on
// its client; only its file system calls run as the user), and another
// client's operation as that user still answers at once.
func TestSlowTarReadersAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	a := newTestAgent(t)
	dir, err := os.MkdirTemp("", "rayito-slow-tar-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	const readers = 2000
	addr := strings.TrimPrefix(a.http.URL, "http://")
	req := "GET /v1/files?" + url.Values{"path": {dir}, "format": {"tar"}, "user": {"nobody"}}.Encode() +
		" HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer " + testToken + "\r\n\r\n"
	conns := make([]net.Conn, 0, readers)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range readers {
		// From eight addresses: eight clients (a client holds at most
		// half of the files open for transfers).
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		c.(*net.TCPConn).SetReadBuffer(4 << 10)
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	// Each download has started: its answer's head arrived. Then nobody
	// reads on.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("reader %d: %v %v", i, resp, err)
		}
	}
	if n := threads(t); n > 400 {
		t.Fatalf("%d OS threads with %d slow tar readers: downloads hold threads", n, readers)
	}
	rc := a.dial(t)
	st := result(t, rc.call(map[string]any{"op": "file_stat", "path": filepath.Join(dir, "big"), "user": "nobody"}))
	if st["size"] != float64(4<<20) {
		t.Fatalf("file_stat as nobody beside the slow readers: %v", st)
	}
}

// threads is how many OS threads this process has.
func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal(fmt.Errorf("no Threads line in /proc/self/status"))
	return 0
}
