// Package filestest gives the HTTP upload routes' tests a client that goes
// away in the middle of its body, and a way to see the temporary files an
// upload leaves.
package filestest

import (
	"errors"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/files"
)

// cleanupBound is how long an agent may take to remove an upload's
// temporary files once its client is gone; generous for a loaded machine.
const cleanupBound = 10 * time.Second

// Targets are the files a broken upload's request may write, in the
// directory BrokenUpload gives it; each holds "old NAME" before.
var Targets = []string{"a.txt", "b.txt"}

// BrokenUpload checks that a client going away in the middle of its body
// leaves the targets as they were and no temporary file behind. request
// builds the upload into dir: its head (lines ending in "\n", without
// Content-Length) and its body. BrokenUpload sends the head, promising
// the whole body, and the first half of the body, waits until the agent
// has staged a file, then drops the connection.
func BrokenUpload(t *testing.T, addr string, request func(dir string) (head string, body []byte)) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range Targets {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("old "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	head, body := request(dir)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	head = strings.ReplaceAll(head, "\n", "\r\n") + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := c.Write(append([]byte(head), body[:len(body)/2]...)); err != nil {
		t.Fatal(err)
	}
	staged := WaitTemps(dir, func(n int) bool { return n > 0 })
	c.Close()
	if !staged {
		t.Fatalf("no temporary file in %s: the upload was not staged", dir)
	}
	if !WaitTemps(dir, func(n int) bool { return n == 0 }) {
		t.Fatalf("temporary files left after the client went away: %v", Temps(dir))
	}
	for _, name := range Targets {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != "old "+name {
			t.Fatalf("%s holds %d bytes %.20q after a broken upload", name, len(got), got)
		}
	}
}

// WaitTemps waits, within a bound, until the number of temporary files in
// dir satisfies ok, and says whether it did.
func WaitTemps(dir string, ok func(int) bool) bool {
	for deadline := time.Now().Add(cleanupBound); ; time.Sleep(10 * time.Millisecond) {
		if ok(len(Temps(dir))) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Temps lists the temporary files of uploads in dir.
func Temps(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var temps []string
	for _, e := range entries {
		if files.IsTemp(e.Name()) {
			temps = append(temps, e.Name())
		}
	}
	return temps
}

// RaceUpload sends req with a multipart body of one part a file for each
// of filenames (field "file"). Once the agent has staged them all as
// temporary files in dir, and before the body ends, it runs meanwhile:
// what another process does to the targets between the staging and the
// commit. It returns the response's status and body.
func RaceUpload(t *testing.T, req *http.Request, dir string, filenames []string, meanwhile func()) (int, []byte) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	req.Body = pr
	req.ContentLength = -1
	req.Header.Set("Content-Type", mw.FormDataContentType())
	go func() {
		for _, name := range filenames {
			part, err := mw.CreateFormFile("file", name)
			if err == nil {
				_, err = io.WriteString(part, "new "+filepath.Base(name))
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		if !WaitTemps(dir, func(n int) bool { return n == len(filenames) }) {
			pw.CloseWithError(errors.New("the upload's files were not staged"))
			return
		}
		meanwhile()
		pw.CloseWithError(mw.Close())
	}()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
