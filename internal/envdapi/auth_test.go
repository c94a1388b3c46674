package envdapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
)

// post sends one unary RPC as the SDK does, with the given headers, and
// returns the status and the decoded error body.
func post(t *testing.T, a *agent, path string, headers map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", a.url+path, bytes.NewReader([]byte("{}")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func TestAuth(t *testing.T) {
	t.Parallel()
	secured := newAgent(t, agentOptions{})
	open := newAgent(t, agentOptions{open: true})
	none := newAgent(t, agentOptions{noToken: true})
	for _, c := range []struct {
		name    string
		a       *agent
		headers map[string]string
		status  int
		words   string
	}{
		{"token", secured, map[string]string{"X-Access-Token": nativeToken}, 200, ""},
		{"no token", secured, nil, 401, "missing access token"},
		{"wrong token", secured, map[string]string{"X-Access-Token": "guess"}, 401, "wrong access token"},
		{"bearer is the native surface's", secured, map[string]string{"Authorization": "Bearer " + nativeToken}, 401, "X-Access-Token"},
		{"open mode", open, nil, 200, ""},
		{"no token configured", none, map[string]string{"X-Access-Token": "anything"}, 401, "--envd-open"},
	} {
		for _, path := range []string{"/process.Process/List", "/filesystem.Filesystem/Stat"} {
			status, body := post(t, c.a, path, c.headers)
			if c.status == 200 {
				if status == 401 {
					t.Errorf("%s %s: refused: %v", c.name, path, body)
				}
				continue
			}
			msg, _ := body["message"].(string)
			if status != c.status || body["code"] != "unauthenticated" || !bytes.Contains([]byte(msg), []byte(c.words)) {
				t.Errorf("%s %s: %d %v, want %d unauthenticated with %q", c.name, path, status, body, c.status, c.words)
			}
		}
	}
	// A stream is refused before it starts anything.
	s, err := secured.pc.Start(ctxLong(t), connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "true"}}))
	if err == nil {
		err = collect(s, nil).err
	}
	wantCode(t, err, connect.CodeUnauthenticated, "") // a stream client reads the status only
	if n := len(secured.streams.List("")); n != 0 {
		t.Fatalf("a refused start left %d streams", n)
	}
}

// sign signs a /files URL the way the SDK does.
func sign(path, op, user, token string, exp int64) string {
	msg := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		msg += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(msg))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// /files takes the token or a signed URL; a request that passes is served
// (200 for the file that exists, 404 for the one that does not).
func TestFilesAuth(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	mustWrite(t, f, "content")
	up := filepath.Join(dir, "up")
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	for _, c := range []struct {
		name, method string
		query        url.Values
		headers      map[string]string
		status       int
	}{
		{"token", "GET", url.Values{"path": {f}}, map[string]string{"X-Access-Token": nativeToken}, 200},
		{"nothing", "GET", url.Values{"path": {f}}, nil, 401},
		{"signed read", "GET", url.Values{"path": {f}, "signature": {sign(f, "read", "", nativeToken, 0)}}, nil, 200},
		{"signed write", "POST", url.Values{"path": {up}, "username": {"root"}, "signature": {sign(up, "write", "root", nativeToken, 0)}}, nil, 200},
		{"signed with expiry", "GET", url.Values{"path": {"/a"}, "signature": {sign("/a", "read", "", nativeToken, future)}, "signature_expiration": {strconv.FormatInt(future, 10)}}, nil, 404},
		{"expired", "GET", url.Values{"path": {f}, "signature": {sign(f, "read", "", nativeToken, past)}, "signature_expiration": {strconv.FormatInt(past, 10)}}, nil, 401},
		{"read signature to write", "POST", url.Values{"path": {up}, "signature": {sign(up, "read", "", nativeToken, 0)}}, nil, 401},
		{"other user", "GET", url.Values{"path": {f}, "username": {"root"}, "signature": {sign(f, "read", "", nativeToken, 0)}}, nil, 401},
		{"other path", "GET", url.Values{"path": {f + "x"}, "signature": {sign(f, "read", "", nativeToken, 0)}}, nil, 401},
		{"wrong token wins over a signature", "GET", url.Values{"path": {f}, "signature": {sign(f, "read", "", nativeToken, 0)}}, map[string]string{"X-Access-Token": "guess"}, 401},
	} {
		var body io.Reader
		if c.method == "POST" {
			body = strings.NewReader("uploaded")
		}
		req, _ := http.NewRequest(c.method, a.url+"/files?"+c.query.Encode(), body)
		req.Header.Set("Content-Type", "application/octet-stream")
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, raw, c.status)
			continue
		}
		if c.status == 200 {
			continue
		}
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &e); e.Code != c.status || e.Message == "" {
			t.Errorf("%s: body %s", c.name, raw)
		}
	}
	if b, err := os.ReadFile(up); err != nil || string(b) != "uploaded" {
		t.Fatalf("the signed write wrote %q, %v", b, err)
	}
}

// Methods /files does not take are refused; health stays 2xx for the
// SDK's isRunning.
func TestMethodsAndHealth(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	req, _ := http.NewRequest("PUT", a.url+"/files?path=/a", nil)
	req.Header.Set("X-Access-Token", nativeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /files: %d", resp.StatusCode)
	}
	resp, err = http.Get(a.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("health: %d", resp.StatusCode)
	}
}

// Bytes through the API count as traffic, for the idle policy.
func TestTrafficCounted(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	before := a.counter.Snapshot()
	s, err := a.pc.Start(ctxLong(t), startReq("head -c 100000 /dev/zero"))
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(s, nil); len(r.stdout) != 100000 {
		t.Fatalf("%d bytes, %v", len(r.stdout), r.err)
	}
	after := a.counter.Snapshot()
	if after.BytesOut-before.BytesOut < 100000 || after.BytesIn == before.BytesIn {
		t.Fatalf("traffic %+v then %+v", before, after)
	}
}

// A URL signature opens /files only: the same signed query on an RPC
// route (a leaked download URL's query pasted onto the process service)
// gets no further than no token at all.
func TestSignatureOnlyOpensFiles(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	q := url.Values{"path": {"/"}, "signature": {sign("/", "read", "", nativeToken, 0)}}
	for _, op := range []string{"read", "write"} { // the RPCs are POSTs, as uploads are
		signed := url.Values{"path": {"/"}, "signature": {sign("/", op, "", nativeToken, 0)}}
		for _, path := range []string{"/process.Process/List", "/filesystem.Filesystem/Stat"} {
			status, body := post(t, a, path+"?"+signed.Encode(), nil)
			if status != 401 || body["code"] != "unauthenticated" {
				t.Errorf("%s-signed %s: %d %v, want 401 unauthenticated", op, path, status, body)
			}
		}
	}
	// The same signature opens /files, so the refusal above is the route's.
	resp, err := http.Get(a.url + "/files?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 401 {
		t.Fatalf("the signed /files URL was refused: %d", resp.StatusCode)
	}
}
