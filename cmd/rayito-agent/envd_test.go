package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The agent serves the envd API on its listener with its one token, and a
// resume cuts the API's streams: the wiring of serve.
func TestServeEnvdAPI(t *testing.T) {
	const token = "envd-serve-token"
	base := "http" + strings.TrimPrefix(startAgent(t, token), "ws")
	post := func(path, tok string, body []byte, contentType string) *http.Response {
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
		if tok != "" {
			req.Header.Set("X-Access-Token", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for tok, want := range map[string]int{token: 200, "": 401, "wrong": 401} {
		resp := post("/process.Process/List", tok, []byte("{}"), "application/json")
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("List with token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}

	msg := []byte(`{"process":{"cmd":"sleep","args":["1000"]},"stdin":false}`)
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	resp := post("/process.Process/Start", token, env, "application/connect+json")
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	next := func() (byte, []byte) {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatal(err)
		}
		return head[0], b
	}
	if _, start := next(); !bytes.Contains(start, []byte(`"start"`)) {
		t.Fatalf("first message %s", start)
	}
	req, _ := http.NewRequest("POST", base+"/v1/resume", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	flags, last := next()
	var end struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(last, &end)
	if flags&2 == 0 || end.Error.Code != "unavailable" || !strings.Contains(end.Error.Message, "resume generation 1") {
		t.Fatalf("after the resume: flags %x, %s", flags, last)
	}
}
