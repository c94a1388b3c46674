package jupyterapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc/proctest"
)

func TestAuthForms(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	for _, tc := range []struct {
		name   string
		path   string
		header []string
		want   int
	}{
		{"token header", "api/kernelspecs", []string{"Authorization", "token " + testToken}, 200},
		{"bearer header", "api/kernelspecs", []string{"Authorization", "Bearer " + testToken}, 200},
		{"query", "api/kernelspecs?token=" + testToken, nil, 200},
		{"cache buster", "api/kernels?1700000000000&token=" + testToken, nil, 200},
		{"none", "api/kernelspecs", nil, 403},
		{"wrong token", "api/kernelspecs", []string{"Authorization", "token nope"}, 403},
		{"wrong scheme", "api/kernelspecs", []string{"Authorization", "Basic " + testToken}, 403},
		{"wrong query", "api/kernels?token=nope", nil, 403},
		{"header wins over query", "api/kernels?token=" + testToken, []string{"Authorization", "token nope"}, 403},
		// Near misses of the token, in each form.
		{"token header, a prefix", "api/kernelspecs", []string{"Authorization", "token " + testToken[:len(testToken)-1]}, 403},
		{"token header, more", "api/kernelspecs", []string{"Authorization", "token " + testToken + "x"}, 403},
		{"token header, empty", "api/kernelspecs", []string{"Authorization", "token "}, 403},
		{"query, a prefix", "api/kernelspecs?token=" + testToken[:len(testToken)-1], nil, 403},
		{"query, more", "api/kernelspecs?token=" + testToken + "x", nil, 403},
		{"query, empty", "api/kernelspecs?token=", nil, 403},
		{"websocket without token", "api/kernels/k1/channels", nil, 403},
		{"resource without token", "kernelspecs/python3/logo-64x64.png", nil, 403},
		// The agent's own routes keep their own auth.
		{"agent route", "v1/traffic", []string{"Authorization", "token " + testToken}, 401},
	} {
		res, body := a.doAuth(t, "GET", tc.path, "", tc.header...)
		if res.StatusCode != tc.want {
			t.Errorf("%s: GET /%s = %d %s, want %d", tc.name, tc.path, res.StatusCode, body, tc.want)
		}
		if tc.want == 403 && !strings.Contains(body, `"message"`) {
			t.Errorf("%s: error body %s is not jupyter_server's shape", tc.name, body)
		}
	}
}

// TestRESTErrors checks every route's error paths.
func TestRESTErrors(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	_, body := a.do(t, "POST", "api/sessions", `{"path":"a.ipynb","type":"notebook","kernel":{"id":"`+k.ID()+`"}}`)
	var sess struct{ ID string }
	json.Unmarshal([]byte(body), &sess)
	if sess.ID == "" {
		t.Fatalf("session not created: %s", body)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
		mention            string
	}{
		{"GET", "api/kernels/nope", "", 404, "nope"},
		{"DELETE", "api/kernels/nope", "", 404, "nope"},
		{"POST", "api/kernels/nope/interrupt", "", 404, "nope"},
		{"POST", "api/kernels/nope/restart", "", 404, "nope"},
		{"GET", "api/kernels/nope/channels", "", 404, "nope"},
		{"POST", "api/kernels/" + k.ID() + "/explode", "", 404, "no route"},
		{"POST", "api/kernels", `{"name":`, 400, "Invalid JSON"},
		{"POST", "api/kernels", `{"name":"cobol"}`, 404, "cobol"},
		{"POST", "api/kernels", `{"name":"../x"}`, 400, "invalid"},
		{"PUT", "api/kernels", "", 405, "PUT"},
		{"POST", "api/kernels/" + k.ID(), "", 405, "POST"},
		{"GET", "api/kernels/" + k.ID() + "/interrupt", "", 405, "GET"},
		{"GET", "api/kernelspecs/cobol", "", 404, "cobol"},
		{"GET", "kernelspecs/cobol/logo-64x64.png", "", 404, "cobol"},
		{"GET", "kernelspecs/python3/kernel.json", "", 404, "no resource"},
		{"GET", "kernelspecs/python3/..%2fkernel.json", "", 404, ""},
		{"GET", "api/sessions/nope", "", 404, "nope"},
		{"PATCH", "api/sessions/nope", `{}`, 404, "nope"},
		{"DELETE", "api/sessions/nope", "", 404, "nope"},
		{"POST", "api/sessions", `[1`, 400, "Invalid JSON"},
		{"POST", "api/sessions", `{"type":"notebook"}`, 400, "path"},
		{"POST", "api/sessions", `{"path":"b.ipynb"}`, 400, "type"},
		{"POST", "api/sessions", `{"path":"b.ipynb","type":"notebook","kernel":{"name":"cobol"}}`, 404, "cobol"},
		{"PATCH", "api/sessions/" + sess.ID, `{"kernel":`, 400, "Invalid JSON"},
		{"PATCH", "api/sessions/" + sess.ID, `{"kernel":{"id":"nope"}}`, 400, "No such kernel"},
		{"PATCH", "api/sessions/" + sess.ID, `{"kernel":{"name":"cobol"}}`, 404, "cobol"},
		{"PUT", "api/sessions/" + sess.ID, `{}`, 405, "PUT"},
		{"GET", "api/contents/a.ipynb", "", 404, "contents"},
		{"GET", "api/terminals", "", 404, "terminals"},
		{"GET", "api/nothing", "", 404, "no route"},
	} {
		res, body := a.do(t, tc.method, tc.path, tc.body, "Content-Type", "text/plain;charset=UTF-8")
		if res.StatusCode != tc.want || !strings.Contains(body, tc.mention) {
			t.Errorf("%s /%s %s: %d %s, want %d mentioning %q", tc.method, tc.path, tc.body, res.StatusCode, body, tc.want, tc.mention)
		}
		var e struct {
			Message *string `json:"message"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Message == nil {
			t.Errorf("%s /%s: body %q is not {message, reason}", tc.method, tc.path, body)
		}
	}
	// None of that disturbed the kernel or the session.
	if res, body := a.do(t, "GET", "api/sessions/"+sess.ID, ""); res.StatusCode != 200 || !strings.Contains(body, k.UUID()) {
		t.Fatalf("session after the errors: %d %s", res.StatusCode, body)
	}
}

var uuidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestKernelLifecycleOverREST(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	res, body := a.do(t, "POST", "api/kernels", "", "Content-Type", "application/json")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("start: %d %s", res.StatusCode, body)
	}
	var m struct {
		ID, Name, LastActivity, ExecutionState string
		Connections                            *int
	}
	decodeModel := func(body string) {
		t.Helper()
		var raw struct {
			ID             string `json:"id"`
			Name           string `json:"name"`
			LastActivity   string `json:"last_activity"`
			ExecutionState string `json:"execution_state"`
			Connections    *int   `json:"connections"`
		}
		if err := json.Unmarshal([]byte(body), &raw); err != nil {
			t.Fatalf("model %s: %v", body, err)
		}
		m.ID, m.Name, m.LastActivity, m.ExecutionState, m.Connections = raw.ID, raw.Name, raw.LastActivity, raw.ExecutionState, raw.Connections
	}
	decodeModel(body)
	if m.ID == "" || m.Name != "python3" || m.ExecutionState != "idle" || m.Connections == nil || *m.Connections != 0 || !strings.HasSuffix(m.LastActivity, "Z") {
		t.Fatalf("model %s", body)
	}
	if loc := res.Header.Get("Location"); loc != "/api/kernels/"+m.ID {
		t.Fatalf("Location %q", loc)
	}
	// Jupyter's servers and clients route kernel ids shaped like UUIDs
	// (Notebook's gateway mode 404s /api/kernels/k1/channels).
	if !uuidShape.MatchString(m.ID) {
		t.Fatalf("kernel id %q is not a UUID", m.ID)
	}
	// The kernel is the agent's: the manager lists it, under its own id
	// and this one.
	if ks := a.kernels.List(); len(ks) != 1 || ks[0].UUID != m.ID || ks[0].Kernel == m.ID {
		t.Fatalf("manager lists %+v", ks)
	}
	// Its "k1" id reaches it too, and answers with the UUID.
	if res, body := a.do(t, "GET", "api/kernels/"+a.kernels.List()[0].Kernel, ""); res.StatusCode != 200 || !strings.Contains(body, `"id":"`+m.ID+`"`) {
		t.Fatalf("get by the manager's id: %d %s", res.StatusCode, body)
	}
	res, body = a.do(t, "GET", "api/kernels", "")
	if res.StatusCode != 200 || !strings.Contains(body, `"id":"`+m.ID+`"`) {
		t.Fatalf("list: %d %s", res.StatusCode, body)
	}
	if res, body = a.do(t, "POST", "api/kernels/"+m.ID+"/interrupt", ""); res.StatusCode != http.StatusNoContent {
		t.Fatalf("interrupt: %d %s", res.StatusCode, body)
	}
	res, body = a.do(t, "POST", "api/kernels/"+m.ID+"/restart", "")
	if res.StatusCode != 200 {
		t.Fatalf("restart: %d %s", res.StatusCode, body)
	}
	decodeModel(body)
	if m.ExecutionState != "idle" {
		t.Fatalf("after restart: %s", body)
	}
	if res, body = a.do(t, "DELETE", "api/kernels/"+m.ID, ""); res.StatusCode != http.StatusNoContent {
		t.Fatalf("shutdown: %d %s", res.StatusCode, body)
	}
	if res, _ = a.do(t, "GET", "api/kernels/"+m.ID, ""); res.StatusCode != 404 {
		t.Fatalf("get after shutdown: %d", res.StatusCode)
	}
	if res, body = a.do(t, "GET", "api/kernels", ""); body != "[]\n" {
		t.Fatalf("list after shutdown: %s", body)
	}
}

func TestKernelspecs(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	res, body := a.do(t, "GET", "api/kernelspecs?1700000000000", "")
	var specs struct {
		Default     string `json:"default"`
		KernelSpecs map[string]struct {
			Name      string            `json:"name"`
			Resources map[string]string `json:"resources"`
			Spec      struct {
				Argv          []string          `json:"argv"`
				DisplayName   string            `json:"display_name"`
				Language      string            `json:"language"`
				InterruptMode string            `json:"interrupt_mode"`
				Env           map[string]string `json:"env"`
				Metadata      map[string]any    `json:"metadata"`
			} `json:"spec"`
		} `json:"kernelspecs"`
	}
	if err := json.Unmarshal([]byte(body), &specs); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %s: %v", res.StatusCode, body, err)
	}
	py := specs.KernelSpecs["python3"]
	if specs.Default != "python3" || py.Name != "python3" || py.Spec.Language != "python" || len(py.Spec.Argv) == 0 ||
		py.Spec.InterruptMode == "" || py.Spec.Env == nil || py.Spec.Metadata == nil {
		t.Fatalf("kernelspecs %s", body)
	}
	logo := py.Resources["logo-64x64"]
	if logo != "/kernelspecs/python3/logo-64x64.png" {
		t.Fatalf("resources %v", py.Resources)
	}
	res, body = a.do(t, "GET", strings.TrimPrefix(logo, "/"), "")
	if res.StatusCode != 200 || !strings.HasPrefix(body, "\x89PNG") {
		t.Fatalf("logo: %d, %d bytes", res.StatusCode, len(body))
	}
	res, body = a.do(t, "GET", "api/kernelspecs/python3", "")
	if res.StatusCode != 200 || !strings.Contains(body, `"display_name"`) {
		t.Fatalf("one spec: %d %s", res.StatusCode, body)
	}
	if res, body = a.do(t, "GET", "api", ""); res.StatusCode != 200 || !strings.Contains(body, `"version"`) {
		t.Fatalf("/api: %d %s", res.StatusCode, body)
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	// The legacy body form (notebook.path) still works.
	res, body := a.do(t, "POST", "api/sessions", `{"notebook":{"path":"old.ipynb"},"kernel":{"name":"python3"}}`)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	var s1 struct {
		ID, Path, Type string
		Kernel         struct{ ID string }
	}
	json.Unmarshal([]byte(body), &s1)
	if s1.ID == "" || s1.Path != "old.ipynb" || s1.Type != "notebook" || s1.Kernel.ID == "" {
		t.Fatalf("session %s", body)
	}
	// The same path gives the same session.
	res, body = a.do(t, "POST", "api/sessions", `{"path":"old.ipynb","type":"notebook"}`)
	if res.StatusCode != http.StatusCreated || !strings.Contains(body, s1.ID) {
		t.Fatalf("same path: %d %s", res.StatusCode, body)
	}
	// Rename, and move onto a new kernel: the old one is shut down.
	res, body = a.do(t, "PATCH", "api/sessions/"+s1.ID, `{"path":"new.ipynb","name":"new","kernel":{"name":"python3"}}`)
	var s2 struct {
		Path, Name string
		Kernel     struct{ ID string }
	}
	json.Unmarshal([]byte(body), &s2)
	if res.StatusCode != 200 || s2.Path != "new.ipynb" || s2.Name != "new" || s2.Kernel.ID == s1.Kernel.ID {
		t.Fatalf("patch: %d %s", res.StatusCode, body)
	}
	if _, err := a.kernels.Get(s1.Kernel.ID); err == nil {
		t.Fatalf("the session's previous kernel %s still runs", s1.Kernel.ID)
	}
	// Naming the kernel it has (by the UUID it was shown) changes nothing.
	if res, body = a.do(t, "PATCH", "api/sessions/"+s1.ID, `{"kernel":{"id":"`+s2.Kernel.ID+`"}}`); res.StatusCode != 200 || !strings.Contains(body, s2.Kernel.ID) || !uuidShape.MatchString(s2.Kernel.ID) {
		t.Fatalf("patch onto its own kernel: %d %s", res.StatusCode, body)
	}
	if _, err := a.kernels.Get(s2.Kernel.ID); err != nil {
		t.Fatalf("patching a session onto the kernel it has shut it down: %v", err)
	}
	// A session whose kernel is shut down through another surface goes.
	if err := a.kernels.Shutdown(t.Context(), s2.Kernel.ID); err != nil {
		t.Fatal(err)
	}
	if res, body = a.do(t, "GET", "api/sessions", ""); body != "[]\n" {
		t.Fatalf("sessions after their kernel went: %s", body)
	}
	if res, _ = a.do(t, "GET", "api/sessions/"+s1.ID, ""); res.StatusCode != 404 {
		t.Fatalf("get: %d", res.StatusCode)
	}
}

// TestExecutionState: the kernel model follows the kernel, busy while a
// cell runs and idle after it, and unknown once the kernel failed the
// resume's survival check.
func TestExecutionState(t *testing.T) {
	t.Parallel()
	a := newAgent(t, false)
	k := a.startKernel(t)
	state := func() string {
		t.Helper()
		res, body := a.do(t, "GET", "api/kernels/"+k.ID(), "")
		var m struct {
			State string `json:"execution_state"`
		}
		if err := json.Unmarshal([]byte(body), &m); err != nil || res.StatusCode != 200 {
			t.Fatalf("model: %d %s", res.StatusCode, body)
		}
		return m.State
	}
	listed := func() string {
		t.Helper()
		_, body := a.do(t, "GET", "api/kernels", "")
		var ms []struct {
			State string `json:"execution_state"`
		}
		if err := json.Unmarshal([]byte(body), &ms); err != nil || len(ms) != 1 {
			t.Fatalf("list: %s", body)
		}
		return ms[0].State
	}

	w := a.dialKernel(t, k.ID(), true)
	gate := filepath.Join(t.TempDir(), "gate")
	id := w.send("shell", "execute_request", executeContent("import os, time\nwhile not os.path.exists("+strconv.Quote(gate)+"): time.sleep(0.02)"))
	eventually(t, "the model is busy while the cell runs", func() bool { return state() == "busy" })
	if st := listed(); st != "busy" {
		t.Fatalf("listed as %s while the cell runs", st)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.until(isReply(id, "execute_reply"))
	eventually(t, "the model is idle after the cell", func() bool { return state() == "idle" })

	// A kernel alive that does not answer the check is slow: unknown.
	pid := k.Info().Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	eventually(t, "the kernel process is stopped", func() bool { return proctest.Stopped(pid) })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	res := a.kernels.Check(ctx)
	cancel()
	if !slices.Contains(res.Slow, k.ID()) {
		t.Fatalf("check: %+v, want %s slow", res, k.ID())
	}
	if st, lst := state(), listed(); st != "unknown" || lst != "unknown" {
		t.Fatalf("a slow kernel's model is %s, listed as %s; want unknown", st, lst)
	}
	// Continued, it passes the next check and is idle again.
	syscall.Kill(pid, syscall.SIGCONT)
	eventually(t, "the continued kernel passes a check", func() bool {
		return slices.Contains(a.kernels.Check(t.Context()).Alive, k.ID())
	})
	// The checks' requests queued while it was stopped make it busy for a
	// moment as it answers them.
	eventually(t, "the continued kernel's model is idle", func() bool { return state() == "idle" })
}
