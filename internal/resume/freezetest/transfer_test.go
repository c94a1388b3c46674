package freezetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/client"
)

// patterned writes size bytes of a pattern that differs in every MiB (a
// random block, stamped with the block's number) to w, and returns their
// SHA-256: a reordered, doubled or missing block changes it.
func patterned(w io.Writer, size int64) [32]byte {
	block := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(block)
	h := sha256.New()
	for off := int64(0); off < size; off += int64(len(block)) {
		binary.LittleEndian.PutUint64(block, uint64(off))
		n := min(int64(len(block)), size-off)
		w.Write(block[:n])
		h.Write(block[:n])
	}
	return [32]byte(h.Sum(nil))
}

func patternedFile(t testing.TB, path string, size int64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return patterned(f, size)
}

func fileSum(t testing.TB, path string) ([32]byte, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil)), n
}

// temporaries lists the agent's temporary upload files in dir.
func temporaries(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".rayito-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// paced reads or writes at most a MiB every 20 ms, so a transfer lasts
// long enough to be paused in its middle, and counts what went through.
type paced struct {
	n atomic.Int64
}

func (p *paced) step(n int) {
	p.n.Add(int64(n))
	time.Sleep(20 * time.Millisecond)
}

// TestFileTransfersAcrossPause: a download and an upload are both under
// way when the sandbox pauses; after the resume the client reattaches
// both and each finishes byte-exact.
func TestFileTransfersAcrossPause(t *testing.T) {
	t.Parallel()
	const size = 48 << 20
	a := startAgent(t, agentConfig{})
	c, rc := dialCounted(t, a)
	dir := t.TempDir()
	downSum := patternedFile(t, filepath.Join(dir, "down"), size)

	r, err := c.Files().Open(ctxLong(t), filepath.Join(dir, "down"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Files().Create(ctxLong(t), filepath.Join(dir, "up"), client.WriteOptions{Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	var down, up paced
	var wg sync.WaitGroup
	var gotSum, upSum [32]byte
	var readErr, writeErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		h := sha256.New()
		buf := make([]byte, 1<<20)
		for {
			n, err := io.ReadFull(r, buf)
			h.Write(buf[:n])
			down.step(n)
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				readErr = err
				return
			}
		}
		gotSum = [32]byte(h.Sum(nil))
	}()
	go func() {
		defer wg.Done()
		pw := pacedWriter{w: w, p: &up}
		upSum = patterned(&pw, size)
		if pw.err != nil {
			writeErr = pw.err
			return
		}
		writeErr = w.Close()
	}()
	eventually(t, "both transfers under way", func() bool { return down.n.Load() > 4<<20 && up.n.Load() > 4<<20 })
	pauseAndResume(t, a, c, rc, "files-1", func() {
		if down.n.Load() >= size || up.n.Load() >= size {
			t.Errorf("a transfer was over before the pause (%d down, %d up)", down.n.Load(), up.n.Load())
		}
	})
	wg.Wait()
	if readErr != nil || gotSum != downSum {
		t.Fatalf("download: %v, checksum match %v", readErr, gotSum == downSum)
	}
	if writeErr != nil {
		t.Fatalf("upload: %v", writeErr)
	}
	if sum, n := fileSum(t, filepath.Join(dir, "up")); sum != upSum || n != size {
		t.Fatalf("uploaded file: %d bytes, checksum match %v", n, sum == upSum)
	}
}

type pacedWriter struct {
	w   io.Writer
	p   *paced
	err error
}

func (pw *pacedWriter) Write(b []byte) (int, error) {
	if pw.err != nil {
		return 0, pw.err
	}
	n, err := pw.w.Write(b)
	pw.err = err
	pw.p.step(n)
	return n, err
}

// TestCrashMidUpload: the power goes off in the middle of an upload. The
// old file is intact, and the temporary file the upload left is removed
// when the agent starts again.
func TestCrashMidUpload(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	a := startAgent(t, agentConfig{StateDir: state})
	dir := t.TempDir()
	target := filepath.Join(dir, "config.json")
	os.WriteFile(target, []byte(`{"old": true}`), 0o644)
	c := a.dial(t, client.Options{DisableReconnect: true})
	w, err := c.Files().Create(ctxLong(t), target, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(bytes.Repeat([]byte("new "), 1<<20))
	eventually(t, "the upload is being written", func() bool {
		for _, name := range temporaries(t, dir) {
			if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Size() > 0 {
				return true
			}
		}
		return false
	})
	a.powerOff(t)
	if got, _ := os.ReadFile(target); string(got) != `{"old": true}` {
		t.Fatalf("after the crash: %q", got)
	}
	startAgent(t, agentConfig{StateDir: state})
	if left := temporaries(t, dir); len(left) != 0 {
		t.Fatalf("temporary files after the restart: %v", left)
	}
	if got, _ := os.ReadFile(target); string(got) != `{"old": true}` {
		t.Fatalf("after the restart: %q", got)
	}
}

// transferMemory bounds how much a transfer may raise the agent's peak
// resident memory: buffers and windows are a few MiB, so a transfer that
// held the file (or a good part of it) in memory goes far past it.
const transferMemory = 128 << 20

// TestGigabyteTransfers moves 1 GiB each way through HTTP and through the
// websocket, on a tmpfs and on the disk (ext4 on the project's machines),
// and checks every byte by SHA-256, and that the agent's peak memory grew
// by less than transferMemory: files larger than memory stream through.
// The websocket transfers run the agent binary's own cp command (not
// built with -race, like the agent), so the test stays affordable under
// -race.
func TestGigabyteTransfers(t *testing.T) {
	const size = 1 << 30
	a := startAgent(t, agentConfig{})
	basePeak := a.peakMemory(t)
	checkMemory := func(t *testing.T, transfer string) {
		t.Helper()
		if grew := a.peakMemory(t) - basePeak; grew >= transferMemory {
			t.Fatalf("%s: the agent's peak memory grew by %d MiB (from %d MiB): a transfer held the file", transfer, grew>>20, basePeak>>20)
		}
	}
	defer func() { t.Logf("agent's peak memory: %d MiB before, %d MiB after", basePeak>>20, a.peakMemory(t)>>20) }()
	shm, err := os.MkdirTemp("/dev/shm", "freezetest-")
	if err != nil {
		t.Fatalf("a tmpfs is needed at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	for _, fs := range []struct {
		name  string
		dir   string
		magic int64
	}{{"tmpfs", shm, unix.TMPFS_MAGIC}, {"disk", t.TempDir(), 0}} {
		t.Run(fs.name, func(t *testing.T) {
			var sfs unix.Statfs_t
			unix.Statfs(fs.dir, &sfs)
			if fs.magic != 0 && sfs.Type != fs.magic {
				t.Fatalf("%s is not a %s", fs.dir, fs.name)
			}
			t.Logf("%s: filesystem 0x%x", fs.dir, sfs.Type)
			src := filepath.Join(fs.dir, "src")
			want := patternedFile(t, src, size)
			defer os.Remove(src)

			// HTTP download, hashed as it arrives.
			resp := a.filesRequest(t, "GET", url.Values{"path": {src}}, nil)
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || n != size || [32]byte(h.Sum(nil)) != want {
				t.Fatalf("HTTP download: %d bytes, %v, checksum match %v", n, err, [32]byte(h.Sum(nil)) == want)
			}
			checkMemory(t, "HTTP download")

			// HTTP upload.
			up := filepath.Join(fs.dir, "up-http")
			f, _ := os.Open(src)
			resp = a.filesRequest(t, "PUT", url.Values{"path": {up}}, f)
			f.Close()
			var put struct {
				Size   int64
				SHA256 string
			}
			json.NewDecoder(resp.Body).Decode(&put)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || put.Size != size || put.SHA256 != hex.EncodeToString(want[:]) {
				t.Fatalf("HTTP upload: %d %+v", resp.StatusCode, put)
			}
			checkFile(t, up, want, size)
			checkMemory(t, "HTTP upload")

			// Websocket download and upload, with the cp command.
			down := filepath.Join(fs.dir, "down-ws")
			a.cp(t, ":"+src, down)
			checkFile(t, down, want, size)
			checkMemory(t, "websocket download")
			upWS := filepath.Join(fs.dir, "up-ws")
			a.cp(t, src, ":"+upWS)
			checkFile(t, upWS, want, size)
			checkMemory(t, "websocket upload")
		})
	}
}

// peakMemory is the agent's peak resident memory (VmHWM) in bytes.
func (a *agent) peakMemory(t testing.TB) int64 {
	t.Helper()
	status := "/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/status"
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(b), "\nVmHWM:")
	kib, _, _ := strings.Cut(rest, "kB")
	n, err := strconv.ParseInt(strings.TrimSpace(kib), 10, 64)
	if !found || err != nil {
		t.Fatalf("no VmHWM in %s", status)
	}
	return n << 10
}

// checkFile checks a transferred file's size and hash, then removes it.
func checkFile(t testing.TB, path string, want [32]byte, size int64) {
	t.Helper()
	defer os.Remove(path)
	if sum, n := fileSum(t, path); n != size || sum != want {
		t.Fatalf("%s: %d bytes, checksum match %v", path, n, sum == want)
	}
}

// filesRequest calls /v1/files with the test token; the body is the
// caller's to close.
func (a *agent) filesRequest(t testing.TB, method string, q url.Values, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.addr+"/v1/files?"+q.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s /v1/files: %v", method, err)
	}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s /v1/files: %d %s", method, resp.StatusCode, b)
	}
	return resp
}

// cp runs the agent binary's cp command against the agent.
func (a *agent) cp(t testing.TB, src, dst string) {
	t.Helper()
	cmd := exec.Command(agentBin, "cp", "--url", a.url, src, dst)
	cmd.Env = append(agentEnv(true), "TMPDIR="+a.tmpDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v: %s", src, dst, err, out)
	}
}
