package codeinterp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/stream"
)

func TestAuthHeaders(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"access token", []string{"X-Access-Token", testToken}, 200},
		{"traffic token", []string{"E2B-Traffic-Access-Token", testToken}, 200},
		{"bearer", []string{"Authorization", "Bearer " + testToken}, 200},
		{"wrong access token, right traffic token", []string{"X-Access-Token", "nope", "E2B-Traffic-Access-Token", testToken}, 200},
		{"none", nil, 401},
		{"wrong", []string{"X-Access-Token", "nope"}, 401},
		{"token scheme is Jupyter's", []string{"Authorization", "token " + testToken}, 401},
		{"query", nil, 401},
		// Near misses of the token, in each header.
		{"access token, a prefix", []string{"X-Access-Token", testToken[:len(testToken)-1]}, 401},
		{"access token, more", []string{"X-Access-Token", testToken + "x"}, 401},
		{"access token, empty", []string{"X-Access-Token", ""}, 401},
		{"traffic token, a prefix", []string{"E2B-Traffic-Access-Token", testToken[:len(testToken)-1]}, 401},
		{"traffic token, more", []string{"E2B-Traffic-Access-Token", testToken + "x"}, 401},
		{"traffic token, empty", []string{"E2B-Traffic-Access-Token", ""}, 401},
	} {
		path := "/contexts"
		if tc.name == "query" {
			path += "?access_token=" + testToken
		}
		res, body := a.doAuth(t, "GET", path, "", tc.header...)
		if res.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, res.StatusCode, body, tc.want)
		}
	}
}

// TestRouteErrors checks every route's error paths; none of them starts a
// kernel.
func TestRouteErrors(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	for _, tc := range []struct {
		method, path, body string
		want               int
		mention            string
	}{
		{"POST", "/execute", `{"code":`, 400, "invalid JSON"},
		{"POST", "/execute", `{}`, 400, "code is required"},
		{"POST", "/execute", `{"code":"1","context_id":"k1","language":"python"}`, 400, "Only one"},
		{"POST", "/execute", `{"code":"1","context_id":"k9"}`, 404, "Context k9 not found"},
		{"POST", "/execute", `{"code":"1","language":"cobol"}`, 400, "cobol"},
		{"GET", "/execute", ``, 405, ""},
		{"POST", "/contexts", `[`, 400, "invalid JSON"},
		{"POST", "/contexts", `{"language":"cobol"}`, 400, "cobol"},
		{"POST", "/contexts", `{"cwd":"/no/such/dir"}`, 400, "/no/such/dir"},
		{"PUT", "/contexts", ``, 405, ""},
		{"DELETE", "/contexts/k9", ``, 404, "Context k9 not found"},
		{"POST", "/contexts/k9/restart", ``, 404, "Context k9 not found"},
		{"GET", "/contexts/k9", ``, 405, ""},
		{"GET", "/contexts/k9/restart", ``, 405, ""},
		{"POST", "/contexts/k9/explode", ``, 404, ""},
	} {
		res, body := a.do(t, tc.method, tc.path, tc.body)
		if res.StatusCode != tc.want || !strings.Contains(body, tc.mention) {
			t.Errorf("%s %s %s: %d %q, want %d mentioning %q", tc.method, tc.path, tc.body, res.StatusCode, body, tc.want, tc.mention)
		}
	}
	if ks := a.kernels.List(); len(ks) != 0 {
		t.Fatalf("errors started kernels: %+v", ks)
	}
}

func TestExecuteErrorsOnAKernel(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	for _, tc := range []struct {
		body    string
		want    int
		mention string
	}{
		{`{"code":"  "}`, 400, "empty"},
		{`{"code":"1","env_vars":{"A=B":"x"}}`, 400, "A=B"},
	} {
		res, body := a.do(t, "POST", "/execute", tc.body)
		if res.StatusCode != tc.want || !strings.Contains(body, tc.mention) {
			t.Errorf("%s: %d %q, want %d mentioning %q", tc.body, res.StatusCode, body, tc.want, tc.mention)
		}
	}
}

func TestExecuteLines(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	ls := joinStdout(a.run(t, `{"code":"from IPython.display import display\nprint('out')\ndisplay({'application/x-rayito': 'raw', 'text/plain': 'shown'}, raw=True)\n6 * 7"}`))
	if got := types(ls); got != "stdout,result,result,number_of_executions,end_of_execution" {
		t.Fatalf("lines %s: %+v", got, ls)
	}
	if ls[0].Text != "out\n" || *ls[1].IsMainResult || ls[1].Text != "shown" || !strings.Contains(string(ls[1].Extra), "application/x-rayito") ||
		!*ls[2].IsMainResult || ls[2].Text != "42" || ls[3].ExecutionCount < 1 {
		t.Fatalf("lines %+v", ls)
	}

	ls = a.run(t, `{"code":"raise ValueError('bad value')"}`)
	if got := types(ls); got != "error,number_of_executions,end_of_execution" {
		t.Fatalf("lines %s: %+v", got, ls)
	}
	if ls[0].Name != "ValueError" || ls[0].Value != "bad value" || ls[0].Traceback == nil || !strings.Contains(*ls[0].Traceback, "ValueError") {
		t.Fatalf("error line %+v", ls[0])
	}
}

// An E2B user's first chart: matplotlib is there (make test and make
// run install it, the image has it) and a plot comes back as a PNG.
func TestFirstChart(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	res, body := a.do(t, "POST", "/execute", `{"code":"import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"}`)
	if res.StatusCode != 200 {
		t.Fatalf("execute: %d %s", res.StatusCode, body)
	}
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		var r struct {
			Type string `json:"type"`
			PNG  string `json:"png"`
			Name string `json:"name"`
		}
		json.Unmarshal([]byte(l), &r)
		if r.Type == "error" {
			t.Fatalf("the chart failed: %s", l)
		}
		if r.Type == "result" && strings.HasPrefix(r.PNG, "iVBOR") {
			return
		}
	}
	t.Fatalf("no PNG in %.500s", body)
}

// TestKeepalive is not parallel: it changes the package's interval.
func TestKeepalive(t *testing.T) {
	defer codeinterp.SetKeepalive(20 * time.Millisecond)()
	a := newAgent(t)
	ls := a.run(t, `{"code":"import time\ntime.sleep(0.5)"}`)
	if got := types(ls); !strings.HasPrefix(got, "keepalive,") || !strings.HasSuffix(got, "number_of_executions,end_of_execution") {
		t.Fatalf("lines %s", got)
	}
}

func TestContextsAreKernels(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	dir := t.TempDir()
	res, body := a.do(t, "POST", "/contexts", `{"cwd":"`+dir+`"}`)
	var c struct{ ID, Language, Cwd string }
	if err := json.Unmarshal([]byte(body), &c); err != nil || res.StatusCode != 200 || c.Language != "python" || c.Cwd != dir {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	if _, err := a.kernels.Get(c.ID); err != nil {
		t.Fatalf("context %s is not a kernel of the manager: %v", c.ID, err)
	}
	res, body = a.do(t, "GET", "/contexts", "")
	if res.StatusCode != 200 || !strings.Contains(body, `"id":"`+c.ID+`"`) {
		t.Fatalf("list: %d %s", res.StatusCode, body)
	}
	if res, body = a.do(t, "POST", "/contexts/"+c.ID+"/restart", ""); res.StatusCode != http.StatusNoContent {
		t.Fatalf("restart: %d %s", res.StatusCode, body)
	}
	if res, body = a.do(t, "DELETE", "/contexts/"+c.ID, ""); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	if res, body = a.do(t, "GET", "/contexts", ""); body != "[]\n" {
		t.Fatalf("list after delete: %s", body)
	}
}

// TestResumeEndsExecution: a resume ends a running /execute with an error
// line naming it; the cell goes on and its output stays readable as a
// cell stream.
func TestResumeEndsExecution(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	gate, res := executeGated(t, a)
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	next := func() line {
		t.Helper()
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			if l.Type != "keepalive" {
				return l
			}
		}
		return line{}
	}
	for out := ""; out != "before\n"; { // one print, maybe in several lines
		l := next()
		if l.Type != "stdout" || !strings.HasPrefix("before\n", out+l.Text) {
			t.Fatalf("line %+v after stdout %q", l, out)
		}
		out += l.Text
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.resume(ctx)
	l := next()
	if l.Type != "error" || l.Name != "SandboxResumed" || !strings.Contains(l.Value, "generation 1") {
		t.Fatalf("after the resume: %+v", l)
	}
	if l := next(); l.Type != "" {
		t.Fatalf("line after the resume's error: %+v", l)
	}

	// The cell still runs; its stream, named in the message, has it all.
	cells := a.streams.List(stream.KindCell)
	if len(cells) != 1 {
		t.Fatalf("cell streams %d", len(cells))
	}
	st := cells[0]
	if !strings.Contains(l.Value, "cell stream "+strconv.FormatUint(st.ID, 10)) {
		t.Fatalf("the error does not name the cell stream %d: %s", st.ID, l.Value)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	att, err := st.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out string
	for {
		it, err := att.Next(ctx, nil, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if it.Kind == stream.ItemEnd {
			if it.End.Status != "ok" {
				t.Fatalf("cell ended %+v", it.End)
			}
			break
		}
		var ev struct{ Type, Text string }
		json.Unmarshal(it.Data, &ev)
		out += ev.Text
	}
	if out != "before\nafter\n" {
		t.Fatalf("the cell's stream has %q", out)
	}
	// And the API works after the resume.
	if ls := a.run(t, `{"code":"'still here'"}`); ls[0].Text != "still here" {
		t.Fatalf("after the resume: %+v", ls)
	}
}

func TestTrafficCounted(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	before := a.traffic.Snapshot()
	a.run(t, `{"code":"print('counted')"}`)
	after := a.traffic.Snapshot()
	if after.BytesIn <= before.BytesIn || after.BytesOut <= before.BytesOut {
		t.Fatalf("traffic %+v then %+v", before, after)
	}
}

func pyString(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestResumeKeepsExecutionStartedUnderItsGeneration: a resume ends the
// /execute responses that began before it, not one that began between
// the publication of its generation and its cut: that one runs to its
// own end.
func TestResumeKeepsExecutionStartedUnderItsGeneration(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	res, body := a.do(t, "POST", "/contexts", `{"language":"python"}`)
	var other struct{ ID string }
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &other) != nil {
		t.Fatalf("create context: %d %s", res.StatusCode, body)
	}
	dir := t.TempDir()
	waiting := func(gate, context string) *http.Response {
		code := "import os, time\nprint('started', flush=True)\nwhile not os.path.exists(" + pyString(gate) + "): time.sleep(0.02)\nprint('done')"
		b, _ := json.Marshal(map[string]string{"code": code, "context_id": context})
		req, _ := http.NewRequest("POST", a.url+"/execute", strings.NewReader(string(b)))
		req.Header.Set("X-Access-Token", testToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	lines := func(res *http.Response) <-chan line {
		out := make(chan line, 64)
		go func() {
			defer close(out)
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				var l line
				json.Unmarshal(sc.Bytes(), &l)
				out <- l
			}
		}()
		return out
	}
	oldGate, freshGate := filepath.Join(dir, "old"), filepath.Join(dir, "fresh")
	old := lines(waiting(oldGate, ""))
	for l := range old {
		if l.Type == "stdout" {
			break
		}
	}
	var fresh <-chan line
	a.beforeCut = func() {
		fresh = lines(waiting(freshGate, other.ID))
		for l := range fresh { // its response has begun: it is registered
			if l.Type == "stdout" {
				break
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.resume(ctx)
	var oldEnd line
	for l := range old {
		oldEnd = l
	}
	if oldEnd.Type != "error" || oldEnd.Name != "SandboxResumed" {
		t.Fatalf("the /execute from before the resume ended with %+v, want SandboxResumed", oldEnd)
	}
	os.WriteFile(freshGate, nil, 0o644)
	os.WriteFile(oldGate, nil, 0o644)
	var got []string
	for l := range fresh {
		got = append(got, l.Type+":"+l.Name+l.Text)
	}
	if strings.Contains(strings.Join(got, " "), "SandboxResumed") || got[len(got)-1] != "end_of_execution:" || !slices.Contains(got, "stdout:done\n") {
		t.Fatalf("the /execute begun under the resume's generation gave %q, want its own end", got)
	}
}

// TestClientGoneAtAResume: a client whose connection closes just before
// the agent notices a resume (the host closed it while the VM was
// paused) cancels nothing: the cell runs on, as every cell a resume cuts
// does.
func TestClientGoneAtAResume(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	gate, res := executeGated(t, a)
	if sc := bufio.NewScanner(res.Body); !sc.Scan() || !strings.Contains(sc.Text(), "before") {
		t.Fatalf("first line %q", sc.Text())
	}
	res.Body.Close() // the client is gone, and the agent sees it...
	for a.cuts.Len() != 0 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.resume(ctx) // ...before the resume shows itself
	time.Sleep(3 * codeinterp.GoneSettle)
	cells := a.streams.List(stream.KindCell)
	if len(cells) != 1 || cells[0].Ended() != nil {
		t.Fatalf("the cell after its client went away at a resume: %d cells, ended %+v", len(cells), cells[0].Ended())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cells[0].Done():
	case <-ctx.Done():
		t.Fatal("the cell did not end once its gate opened")
	}
	if end := cells[0].Ended(); end.Status != "ok" {
		t.Fatalf("the cell ended %+v", end)
	}
}

// executeGated starts, through /execute, a cell that prints "before",
// waits until the gate file exists, then prints "after"; it returns the
// gate and the open response.
func executeGated(t *testing.T, a *agent) (gate string, res *http.Response) {
	t.Helper()
	gate = filepath.Join(t.TempDir(), "gate")
	code := "import os, time\nprint('before', flush=True)\nwhile not os.path.exists(" + pyString(gate) + "): time.sleep(0.02)\nprint('after')"
	body, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequest("POST", a.url+"/execute", strings.NewReader(string(body)))
	req.Header.Set("X-Access-Token", testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return gate, res
}
