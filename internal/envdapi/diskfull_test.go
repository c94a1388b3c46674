package envdapi_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An upload that fails early (the disk fills after a megabyte of a
// bigger body) gets its answer every time, as a client that sends its
// whole body before reading sees it, whether it asked for 100-continue
// or not and whether the body is raw or multipart: the agent reads the
// rest of the body (up to a bound) instead of closing on unread bytes,
// which resets the connection and loses the answer.
func TestFilesUploadDiskFullAnswerArrives(t *testing.T) {
	t.Parallel()
	dir := smallTmpfs(t)
	a := newAgent(t, agentOptions{})
	addr := strings.TrimPrefix(a.url, "http://")
	target := filepath.Join(dir, "f")
	const size = 8 << 20
	raw := make([]byte, size)
	var mp bytes.Buffer
	mp.WriteString("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: application/octet-stream\r\n\r\n")
	mp.Write(raw)
	mp.WriteString("\r\n--b--\r\n")
	envd := "POST /files?" + url.Values{"path": {target}}.Encode()
	native := "/v1/files?" + url.Values{"path": {dir}}.Encode()
	for _, c := range []struct {
		name, route, ctype, expect string
		body                       []byte
	}{
		{"raw", envd, "application/octet-stream", "", raw},
		{"raw, 100-continue", envd, "application/octet-stream", "Expect: 100-continue\r\n", raw},
		{"multipart", envd, "multipart/form-data; boundary=b", "", mp.Bytes()},
		// The native surface's uploads, on the same agent.
		{"native PUT", "PUT /v1/files?" + url.Values{"path": {target}}.Encode(), "application/octet-stream", "", raw},
		{"native POST", "POST " + native, "multipart/form-data; boundary=b", "Expect: 100-continue\r\n", mp.Bytes()},
	} {
		for i := range 30 {
			status, err := rawUpload(addr, c.route, c.ctype, c.expect, c.body)
			if err != nil || status != http.StatusInsufficientStorage {
				t.Fatalf("%s, try %d: status %d, %v; want 507", c.name, i+1, status, err)
			}
		}
	}
}

// rawUpload sends an upload as a plain client does (the whole body,
// then the answer; after 100 Continue when it asks for it) and returns
// the answer's status. Sending fails when the agent closed with the body
// unread: the reset it sends destroys what the client has not read.
func rawUpload(addr, route, ctype, expect string, body []byte) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	head := fmt.Sprintf("%s HTTP/1.1\r\nHost: agent\r\nX-Access-Token: %s\r\nAuthorization: Bearer %[2]s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n",
		route, nativeToken, ctype, len(body), expect)
	if _, err := io.WriteString(c, head); err != nil {
		return 0, err
	}
	br := bufio.NewReader(c)
	if expect != "" {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, fmt.Errorf("before the body: %w", err)
		}
		if resp.StatusCode != http.StatusContinue {
			return resp.StatusCode, nil
		}
	}
	if _, err := c.Write(body); err != nil {
		return 0, fmt.Errorf("sending the body: %w", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
