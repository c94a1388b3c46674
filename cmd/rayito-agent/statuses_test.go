package main

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// TestSameStatusOnEverySurface: the same error gets the same HTTP status
// on every surface that can meet it (the native routes, envd's /files,
// jupyter_server's API, the code interpreter's), the one surface.Status
// gives its code.
func TestSameStatusOnEverySurface(t *testing.T) {
	const token = "status-token"
	base := "http" + strings.TrimPrefix(startAgent(t, token), "ws")
	native := []string{"Authorization", "Bearer " + token}
	e2b := []string{"X-Access-Token", token}
	jupyter := []string{"Authorization", "token " + token}

	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	os.WriteFile(existing, []byte("x"), 0o644)
	parts, partsType := manyParts(t, dir)
	private := filepath.Join(dir, "private")
	os.Mkdir(private, 0o700)
	os.WriteFile(filepath.Join(private, "f"), []byte("x"), 0o644)

	type call struct {
		surface, method, path, body string
		header                      []string
	}
	cases := []struct {
		code  wire.Code
		root  bool // needs root (another user to act as)
		calls []call
	}{
		{wire.CodeNotFound, false, []call{
			{"native", "GET", "/v1/files?path=/no/such/file", "", native},
			{"envd", "GET", "/files?path=/no/such/file", "", e2b},
			{"jupyter", "GET", "/api/kernels/no-such-kernel", "", jupyter},
			{"codeinterp", "DELETE", "/contexts/no-such-context", "", e2b},
		}},
		{wire.CodeBadRequest, false, []call{
			{"native", "PUT", "/v1/files", "x", native},
			{"envd", "GET", "/files", "", e2b},
			{"jupyter", "POST", "/api/kernels", `{"name":`, jupyter},
			{"codeinterp", "POST", "/execute", `{}`, e2b},
		}},
		{wire.CodeConflict, false, []call{
			{"native", "PUT", "/v1/files?exclusive=true&path=" + existing, "y", native},
		}},
		{wire.CodeLimit, false, []call{
			{"native", "POST", "/v1/files?path=" + dir, parts, append([]string{"Content-Type", partsType}, native...)},
			{"envd", "POST", "/files", parts, append([]string{"Content-Type", partsType}, e2b...)},
		}},
		// (envd's /files acts with the agent's rights, as envd does:
		// nobody's download of a root-only file succeeds there.)
		{wire.CodePermissionDenied, true, []call{
			{"native", "GET", "/v1/files?user=nobody&path=" + filepath.Join(private, "f"), "", native},
		}},
	}
	for _, c := range cases {
		if c.root && os.Geteuid() != 0 {
			t.Logf("%s: skipped, needs root", c.code)
			continue
		}
		want := surface.StatusOf(c.code)
		for _, call := range c.calls {
			req, _ := http.NewRequest(call.method, base+call.path, strings.NewReader(call.body))
			for i := 0; i+1 < len(call.header); i += 2 {
				req.Header.Set(call.header[i], call.header[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != want {
				t.Errorf("%s on %s (%s %s): %d %s, want %d", c.code, call.surface, call.method, call.path, res.StatusCode, body, want)
			}
		}
	}
}

// manyParts is a multipart body of more files than one upload may hold.
func manyParts(t *testing.T, dir string) (body, contentType string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := range 1001 {
		part, _ := mw.CreateFormFile("file", filepath.Join(dir, fmt.Sprintf("many-%d", i)))
		io.WriteString(part, "x")
	}
	mw.Close()
	return b.String(), mw.FormDataContentType()
}
