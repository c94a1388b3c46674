package jupyter_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/proc/proctest"
	"github.com/rayito/rayito-agent/internal/surface"
)

const (
	benchToken = "bench-token"
	benchWait  = 2 * time.Minute
	// jupyterPython is Debian's python, which has jupyter_server (from
	// python3-jupyter-server, which make bench installs) and ipykernel.
	jupyterPython = "/usr/bin/python3"
)

// BenchmarkSurfacesRoundTrip runs the cell `x` to its end (execute_reply
// and the idle status, or the end of the NDJSON body) on one kernel of
// the agent: with a bare ZeroMQ client ("direct"), through the Jupyter
// websocket in the v1 framing ("ws") and through the code interpreter's
// /execute ("execute"); and through Debian's jupyter_server's websocket
// on a kernel of the same kernelspec ("jupyter_server"). It reports each
// one's p50 and p99 and the ratios of the p50s.
func BenchmarkSurfacesRoundTrip(b *testing.B) {
	mgr, reg := jupyter.SharedManager()
	kit := surface.New(surface.Options{Auth: surface.NewAuth(benchToken)})
	kit.Mount(endpoint.New(endpoint.Config{Streams: reg, Kernels: mgr}).Surface())
	kit.Mount(jupyterapi.New(jupyterapi.Options{Kernels: mgr}).Surface())
	kit.Mount(codeinterp.New(codeinterp.Options{Kernels: mgr}).Surface())
	hs := httptest.NewServer(kit.Handler())
	defer hs.Close()
	defer kit.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	// The default kernel: /execute without a context runs on it.
	st, id, err := mgr.Execute(ctx, "", "x = 42", 0, false)
	if err != nil {
		b.Fatal(err)
	}
	<-st.Done()
	defer mgr.Shutdown(context.Background(), id)
	k, err := mgr.Get(id)
	if err != nil {
		b.Fatal(err)
	}

	direct := jupyter.DirectClient(b, k)
	ws := dialV1(b, "ws"+strings.TrimPrefix(hs.URL, "http")+"/api/kernels/"+id+"/channels?token="+benchToken)
	js := startJupyterServer(b)
	jid := js.startKernel(b)
	jws := dialV1(b, "ws"+strings.TrimPrefix(js.url, "http")+"/api/kernels/"+jid+"/channels?token="+benchToken)
	jws.execute(b, "x = 42", "")
	// A cell whose result is small (the kernel's time dominates), and one
	// whose result is a MiB of text: what the agent does with a message
	// on its way shows there.
	for _, c := range []struct{ name, code, want, execWant string }{
		{"small", "x", "42", `"text":"42"`},
		{"1MiB-result", "'x' * (1 << 20)", "xxxxxxxx", `"text":"xxxxxxxx`},
	} {
		b.Run(c.name, func(b *testing.B) {
			roundTrips(b, []way{
				{name: "direct", cell: func() { direct(c.code) }},
				{name: "ws", cell: func() { ws.execute(b, c.code, c.want) }},
				{name: "execute", cell: func() { postExecute(b, hs.URL+"/execute", `{"code":`+strconv.Quote(c.code)+`}`, c.execWant) }},
				{name: "jupyter_server", cell: func() { jws.execute(b, c.code, c.want) }},
			})
		})
	}
}

// way is one way to run a cell, and its latencies.
type way struct {
	name string
	cell func()
	lat  []time.Duration
}

// roundTrips times each surface's cell b.N times and reports their p50
// and p99 and the ratios of the p50s. The clients take turns within each
// iteration, so that the load of a shared machine, which drifts over
// seconds, weighs on all alike.
func roundTrips(b *testing.B, surfaces []way) {
	for i := range surfaces {
		surfaces[i].cell() // warm up
	}
	b.ResetTimer()
	for n := range b.N {
		for j := range surfaces {
			s := &surfaces[(n+j)%len(surfaces)]
			start := time.Now()
			s.cell()
			s.lat = append(s.lat, time.Since(start))
		}
	}
	b.StopTimer()
	p50 := map[string]time.Duration{}
	for _, s := range surfaces {
		slices.Sort(s.lat)
		p50[s.name] = s.lat[len(s.lat)/2]
		b.ReportMetric(float64(p50[s.name].Microseconds())/1000, s.name+"-p50-ms")
		b.ReportMetric(float64(s.lat[len(s.lat)*99/100].Microseconds())/1000, s.name+"-p99-ms")
	}
	b.ReportMetric(float64(p50["ws"])/float64(p50["direct"]), "ws/direct")
	b.ReportMetric(float64(p50["execute"])/float64(p50["direct"]), "execute/direct")
	b.ReportMetric(float64(p50["jupyter_server"])/float64(p50["ws"]), "jupyter_server/ws")
	b.ReportMetric(float64(p50["jupyter_server"])/float64(p50["execute"]), "jupyter_server/execute")
}

// v1Client speaks the v1 kernel websocket framing.
type v1Client struct {
	c *websocket.Conn
	n int
}

func dialV1(b *testing.B, url string) *v1Client {
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url+"&session_id=bench", &websocket.DialOptions{Subprotocols: []string{"v1.kernel.websocket.jupyter.org"}})
	if err != nil {
		b.Fatal(err)
	}
	if c.Subprotocol() == "" {
		b.Fatal("no v1 subprotocol")
	}
	c.SetReadLimit(64 << 20)
	b.Cleanup(func() { c.Close(websocket.StatusNormalClosure, "") })
	return &v1Client{c: c}
}

// execute runs code and waits for its execute_reply and idle status;
// want, if set, must be in the execute_result.
func (v *v1Client) execute(b *testing.B, code, want string) {
	v.n++
	id := fmt.Sprintf("bench-%d", v.n)
	header, _ := json.Marshal(map[string]string{"msg_id": id, "msg_type": "execute_request", "session": "bench", "username": "bench", "version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano)})
	content, _ := json.Marshal(map[string]any{"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true})
	parts := [][]byte{[]byte("shell"), header, []byte("{}"), []byte("{}"), content}
	n := len(parts) + 1
	frame := binary.LittleEndian.AppendUint64(nil, uint64(n))
	off := uint64(8 * (n + 1))
	for _, p := range parts {
		frame = binary.LittleEndian.AppendUint64(frame, off)
		off += uint64(len(p))
	}
	frame = binary.LittleEndian.AppendUint64(frame, off)
	for _, p := range parts {
		frame = append(frame, p...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	if err := v.c.Write(ctx, websocket.MessageBinary, frame); err != nil {
		b.Fatal(err)
	}
	got := want == ""
	for replied, idle := false, false; !replied || !idle || !got; {
		_, data, err := v.c.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		count := binary.LittleEndian.Uint64(data)
		offs := make([]uint64, count)
		for i := range offs {
			offs[i] = binary.LittleEndian.Uint64(data[8*(i+1):])
		}
		var h, parent struct {
			MsgType string `json:"msg_type"`
			MsgID   string `json:"msg_id"`
		}
		json.Unmarshal(data[offs[1]:offs[2]], &h)
		json.Unmarshal(data[offs[2]:offs[3]], &parent)
		if parent.MsgID != id {
			continue
		}
		body := data[offs[4]:offs[5]]
		switch h.MsgType {
		case "execute_reply":
			replied = true
		case "execute_result":
			got = got || strings.Contains(string(body), want)
		case "status":
			idle = idle || strings.Contains(string(body), `"idle"`)
		}
	}
}

var httpClient = &http.Client{Timeout: benchWait}

func postExecute(b *testing.B, url, body, want string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("X-Access-Token", benchToken)
	res, err := httpClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || !strings.Contains(string(out), want) {
		b.Fatalf("execute: %d %s %v", res.StatusCode, out, err)
	}
}

// jupyterServer is Debian's jupyter_server in a process of its own.
type jupyterServer struct {
	url string // http://127.0.0.1:port
}

// startJupyterServer starts jupyter_server with the benchmark's token, or
// skips when it is not installed. The test binary's reaper reaps it, so
// its exit is watched with kill(pid, 0), never with Wait.
func startJupyterServer(b *testing.B) *jupyterServer {
	if _, err := proctest.Run(jupyter.SharedReaper(), jupyterPython, "-c", "import jupyter_server"); err != nil {
		b.Skip("jupyter_server is not installed (apt-get install python3-jupyter-server; make bench does)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := b.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(jupyterPython, "-m", "jupyter_server", "--no-browser", "--allow-root",
		"--ServerApp.ip=127.0.0.1", fmt.Sprintf("--ServerApp.port=%d", port), "--ServerApp.port_retries=0",
		"--ServerApp.token="+benchToken, "--ServerApp.root_dir="+dir)
	cmd.Env = append(os.Environ(), "JUPYTER_CONFIG_DIR="+filepath.Join(dir, "config"), "JUPYTER_RUNTIME_DIR="+filepath.Join(dir, "runtime"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	b.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		logFile.Close()
	})
	js := &jupyterServer{url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(benchWait)
	for {
		res, err := http.Get(js.url + "/api/kernelspecs?token=" + benchToken)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return js
			}
		}
		if time.Now().After(deadline) || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			out, _ := os.ReadFile(logFile.Name())
			b.Fatalf("jupyter_server did not come up: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (js *jupyterServer) startKernel(b *testing.B) string {
	req, _ := http.NewRequest("POST", js.url+"/api/kernels", strings.NewReader(`{"name":"python3"}`))
	req.Header.Set("Authorization", "token "+benchToken)
	res, err := httpClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var m struct{ ID string }
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil || res.StatusCode != 201 {
		b.Fatalf("start kernel: %d %v", res.StatusCode, err)
	}
	b.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", js.url+"/api/kernels/"+m.ID, nil)
		req.Header.Set("Authorization", "token "+benchToken)
		if res, err := httpClient.Do(req); err == nil {
			res.Body.Close()
		}
	})
	return m.ID
}
