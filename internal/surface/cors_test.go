package surface

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// corsServer serves, under origins, a token route, a private host route,
// a public route and a websocket that applies the policy, on a real
// listener; it returns the base URL.
func corsServer(t *testing.T, origins string) string {
	t.Helper()
	o, err := ParseOrigins(origins)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Options{Auth: NewAuth(testToken), Origins: o})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, map[string]string{"status": "ok"}) })
	ws := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, o.AcceptOptions(websocket.AcceptOptions{}))
		if err != nil {
			return
		}
		c.Close(websocket.StatusNormalClosure, "")
	})
	srv.Mount(Surface{Name: "test", Tokens: nativeTokens, Routes: []Route{
		{Pattern: "POST /v1/thing", Handler: ok},
		{Pattern: "GET /health", Handler: ok, Access: Public, Host: true},
		{Pattern: "POST /v1/resume", Handler: ok, Host: true, Private: true},
		{Pattern: "GET /v1/connect", Handler: ws},
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + l.Addr().String()
}

func call(t *testing.T, method, url string, h map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func preflight(t *testing.T, url, origin string) *http.Response {
	return call(t, http.MethodOptions, url, map[string]string{
		"Origin": origin, "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization, content-type, connect-protocol-version",
	})
}

// TestCORSAnyOrigin: by default a page of any origin gets its preflight
// answered without a token, and the real request still needs the token;
// credentials are never allowed; the host's private routes answer no
// preflight.
func TestCORSAnyOrigin(t *testing.T) {
	base := corsServer(t, "*")
	const page = "http://127.0.0.1:1234"
	r := preflight(t, base+"/v1/thing", page)
	if r.StatusCode/100 != 2 || r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("preflight: %d, allow-origin %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	if m := r.Header.Get("Access-Control-Allow-Methods"); !strings.Contains(m, "POST") {
		t.Fatalf("preflight allows methods %q", m)
	}
	if h := strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")); !strings.Contains(h, "authorization") || !strings.Contains(h, "connect-protocol-version") {
		t.Fatalf("preflight allows headers %q", h)
	}
	if r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatal("credentials must never be allowed")
	}
	r = call(t, "POST", base+"/v1/thing", map[string]string{"Origin": page})
	if r.StatusCode != http.StatusUnauthorized || r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("without the token: %d, allow-origin %q (the page must be able to read the refusal)", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	r = call(t, "POST", base+"/v1/thing", map[string]string{"Origin": page, "Authorization": "Bearer " + testToken})
	if r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("with the token: %d, allow-origin %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	if e := r.Header.Get("Access-Control-Expose-Headers"); !strings.Contains(e, "Grpc-Status") || !strings.Contains(e, "Location") {
		t.Fatalf("exposed headers %q", e)
	}
	if r = call(t, "GET", base+"/health", map[string]string{"Origin": page}); r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatal("/health is for pages too")
	}
	r = preflight(t, base+"/v1/resume", page)
	if r.Header.Get("Access-Control-Allow-Origin") != "" || r.StatusCode/100 == 2 {
		t.Fatalf("a private route answered a preflight: %d, allow-origin %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	if !upgradeFrom(t, base, page) || !upgradeFrom(t, base, "") {
		t.Fatal("a websocket from any page is accepted by default")
	}
}

// TestCORSNarrowed: with a list, only its pages get CORS headers and
// websocket upgrades; clients outside a browser (no Origin) are not
// affected.
func TestCORSNarrowed(t *testing.T) {
	base := corsServer(t, "http://127.0.0.1:1234, https://*.example.com")
	for origin, allowed := range map[string]bool{
		"http://127.0.0.1:1234": true, "https://ide.example.com": true,
		"http://127.0.0.1:9999": false, "https://example.org": false, "http://ide.example.com": false,
	} {
		r := preflight(t, base+"/v1/thing", origin)
		got := r.Header.Get("Access-Control-Allow-Origin")
		if allowed && got != origin || !allowed && got != "" {
			t.Errorf("%s: allow-origin %q, want allowed=%v", origin, got, allowed)
		}
		if ws := upgradeFrom(t, base, origin); ws != allowed {
			t.Errorf("%s: websocket accepted=%v, want %v", origin, ws, allowed)
		}
	}
	if !upgradeFrom(t, base, "") {
		t.Fatal("a client that sends no Origin was refused")
	}
}

func upgradeFrom(t *testing.T, base, origin string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/connect?access_token="+testToken, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("dial from %q: %v", origin, err)
		}
		return false
	}
	c.CloseNow()
	return true
}

func TestParseOrigins(t *testing.T) {
	for _, s := range []string{"", "*", " * ", "http://a.example, *"} {
		if o, err := ParseOrigins(s); err != nil || !o.Any() {
			t.Errorf("%q: %v, any=%v", s, err, o.Any())
		}
	}
	o, err := ParseOrigins("https://IDE.example.com/, http://127.0.0.1:8080")
	if err != nil || o.String() != "https://ide.example.com,http://127.0.0.1:8080" {
		t.Fatalf("got %v %v", o, err)
	}
	for _, s := range []string{"ide.example.com", "ftp://x", "https://a.example/path", "https://*.*.example", "http://"} {
		if _, err := ParseOrigins(s); err == nil || !strings.Contains(err.Error(), "scheme://host") && !strings.Contains(err.Error(), "at most one") {
			t.Errorf("%q: want a clear error, got %v", s, err)
		}
	}
}
