package envdapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/nodetest"
)

// The benchmarks compare the envd API with the native protocol on one
// agent in one run: through the e2b SDK (Node), through connect-go's own
// client speaking JSON as the SDK does, through a minimal client of the
// same wire format (stdout only), and through the native Go client. The
// paths take turns, round after round, so that a machine whose load
// changes during the run weighs on each alike. Commands run as nobody, so
// a login shell reads no user's profile; every path runs the same argv.
//
//	go test -run '^$' -bench EnvdVsNative -benchtime 1x ./internal/envdapi/

var trueArgv = []string{"/bin/bash", "-l", "-c", "true"}

const (
	// rounds is how many turns each path gets per op; runsPerRound is
	// how many commands a path runs in one turn of the run benchmark.
	rounds       = 10
	runsPerRound = 20
	// benchThroughput is the stdout benchmark's size; its paths take
	// throughputRounds turns each.
	benchThroughput  = 256 << 20
	throughputRounds = 2
)

// reportP50 reports a path's median and 99th percentile latency.
func reportP50(b *testing.B, path string, lat []time.Duration) time.Duration {
	slices.Sort(lat)
	p50 := lat[len(lat)/2]
	b.ReportMetric(float64(p50.Microseconds()), path+"-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), path+"-p99-µs")
	return p50
}

// startNode starts nodetest/bench.mjs against a, kept for the whole
// benchmark so that every turn measures a warm client, as the Go paths
// are.
func startNode(b *testing.B, a *agent) *nodetest.Session {
	needNode(b)
	return nodetest.Start(b, testReaper(b), ".", "nodetest/bench.mjs", []string{"RAYITO_TOKEN=" + nativeToken}, a.url)
}

// nodeBench has the script measure one turn and returns what it measured.
func nodeBench(b *testing.B, node *nodetest.Session, mode string, n int, args ...string) []time.Duration {
	out := node.Ask(strings.Join(append([]string{mode, strconv.Itoa(n)}, args...), " "))
	var us []float64
	if err := json.Unmarshal([]byte(out), &us); err != nil {
		b.Fatalf("node printed %q: %v", out, err)
	}
	lat := make([]time.Duration, len(us))
	for i, u := range us {
		lat[i] = time.Duration(u * float64(time.Microsecond))
	}
	return lat
}

func nativeClient(b *testing.B, a *agent) *client.Client {
	c, err := client.Dial(context.Background(), "ws"+strings.TrimPrefix(a.url, "http"), client.Options{Token: nativeToken})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// timed runs f n times and returns each run's duration.
func timed(n int, f func()) []time.Duration {
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		f()
		lat[i] = time.Since(start)
	}
	return lat
}

// BenchmarkEnvdVsNativeRunTrue is commands.run('true') against the native
// exec of the same argv, from request to exit status.
func BenchmarkEnvdVsNativeRunTrue(b *testing.B) {
	needNode(b)
	a := newAgent(b, agentOptions{open: true, user: "nobody"})
	c := nativeClient(b, a)
	ctx := context.Background()
	native := func() {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: trueArgv})
		if err != nil {
			b.Fatal(err)
		}
		if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
			b.Fatal(st, err)
		}
	}
	envdGo := func() {
		req := startReq("true")
		req.Msg.Process.Args = trueArgv[1:]
		s, err := a.pc.Start(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if r := collect(s, nil); r.err != nil || r.end.GetExitCode() != 0 || !r.end.GetExited() {
			b.Fatal(r.err, r.end)
		}
	}
	node := startNode(b, a)
	// A turn of each path that is not counted: the first commands of a
	// client pay for its start (Node compiling the SDK's code, a first
	// connection), which a long-running client pays once.
	timed(runsPerRound, native)
	timed(runsPerRound, envdGo)
	nodeBench(b, node, "run", runsPerRound)
	var lat [3][]time.Duration
	for range b.N * rounds {
		lat[0] = append(lat[0], timed(runsPerRound, native)...)
		lat[1] = append(lat[1], timed(runsPerRound, envdGo)...)
		lat[2] = append(lat[2], nodeBench(b, node, "run", runsPerRound)...)
	}
	base := reportP50(b, "native", lat[0])
	goP50 := reportP50(b, "envd-go", lat[1])
	sdkP50 := reportP50(b, "envd-sdk", lat[2])
	b.ReportMetric(float64(goP50)/float64(base), "envd-go/native")
	b.ReportMetric(float64(sdkP50)/float64(base), "envd-sdk/native")
	b.ReportMetric(0, "ns/op") // the loop's mean includes Node's start
}

// BenchmarkEnvdVsNativeStdout is 256 MiB of a command's stdout through
// each path; each reports MB/s over all its turns.
func BenchmarkEnvdVsNativeStdout(b *testing.B) {
	needNode(b)
	a := newAgent(b, agentOptions{open: true, user: "nobody"})
	c := nativeClient(b, a)
	ctx := context.Background()
	node := startNode(b, a)
	argv := []string{"head", "-c", strconv.Itoa(benchThroughput), "/dev/zero"}
	body, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": argv[0], "args": argv[1:]}, "stdin": false})
	paths := []struct {
		name string
		run  func() time.Duration
	}{
		{"native", func() time.Duration {
			return timed(1, func() {
				p, err := c.Exec(ctx, client.ExecOptions{Argv: argv})
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, p.Stdout()); err != nil || n != benchThroughput {
					b.Fatal(n, err)
				}
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			})[0]
		}},
		{"envd-wire", func() time.Duration {
			return timed(1, func() {
				if n := rawStdout(b, a.url, body); n != benchThroughput {
					b.Fatal(n)
				}
			})[0]
		}},
		{"envd-go", func() time.Duration {
			return timed(1, func() {
				req := startReq("")
				req.Msg.Process.Cmd, req.Msg.Process.Args = argv[0], argv[1:]
				s, err := a.pc.Start(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for s.Receive() {
					n += len(s.Msg().GetEvent().GetData().GetStdout())
				}
				if s.Err() != nil || n != benchThroughput {
					b.Fatal(n, s.Err())
				}
			})[0]
		}},
		{"envd-sdk", func() time.Duration { return nodeBench(b, node, "stdout", benchThroughput)[0] }},
	}
	total := make([]time.Duration, len(paths))
	for range b.N * throughputRounds {
		for i, p := range paths {
			total[i] += p.run()
		}
	}
	rate := func(d time.Duration) float64 {
		return float64(benchThroughput) * float64(b.N*throughputRounds) / d.Seconds() / 1e6
	}
	for i, p := range paths {
		b.ReportMetric(rate(total[i]), p.name+"-MB/s")
		if i > 0 {
			b.ReportMetric(float64(total[i])/float64(total[0]), p.name+"/native")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// rawStdout runs a Start request over plain HTTP and decodes its stdout the
// least a client can: read each envelope, base64-decode the data. It
// measures the wire format's own cost, without a generic JSON decoder.
func rawStdout(b *testing.B, url string, msg []byte) int {
	req := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(req[1:], uint32(len(msg)))
	copy(req[5:], msg)
	hr, _ := http.NewRequest("POST", url+"/process.Process/Start", bytes.NewReader(req))
	hr.Header.Set("Content-Type", "application/connect+json")
	hr.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	prefix := []byte(`{"event":{"data":{"stdout":"`)
	var head [5]byte
	var payload, out []byte
	n := 0
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			b.Fatal(err)
		}
		size := int(binary.BigEndian.Uint32(head[1:]))
		payload = slices.Grow(payload[:0], size)[:size]
		if _, err := io.ReadFull(r, payload); err != nil {
			b.Fatal(err)
		}
		if head[0]&2 != 0 {
			return n // the end of the stream
		}
		if rest, ok := bytes.CutPrefix(payload, prefix); ok {
			enc := rest[:bytes.IndexByte(rest, '"')]
			out = slices.Grow(out[:0], base64.StdEncoding.DecodedLen(len(enc)))[:base64.StdEncoding.DecodedLen(len(enc))]
			m, err := base64.StdEncoding.Decode(out, enc)
			if err != nil {
				b.Fatal(err)
			}
			n += m
		}
	}
}

// benchFile is the size of the file the files benchmark moves; each path
// writes it then reads it filesPerRound times a turn, filesRounds turns.
const (
	benchFile     = 10 << 20
	filesPerRound = 5
	filesRounds   = 3
)

// BenchmarkEnvdVsNativeFiles writes and reads a 10 MiB file through the
// SDK's files.write (multipart) and files.read against Node's own fetch
// on the native /v1/files routes, and through envd's /files with Go's
// HTTP client (a raw body, and multipart as the SDK sends) against the
// native routes (PUT and GET), as the agent's own user. Every write is
// atomic and synced (fsync) on each path.
func BenchmarkEnvdVsNativeFiles(b *testing.B) {
	needNode(b)
	a := newAgent(b, agentOptions{open: true})
	dir := b.TempDir()
	data := make([]byte, benchFile)
	rand.Read(data)
	call := func(method, url, ctype string, body []byte, bearer bool) {
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, url, r)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if bearer {
			req.Header.Set("Authorization", "Bearer "+nativeToken)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 || (method == "GET" && n != benchFile) {
			b.Fatalf("%s %s: %d, %d bytes", method, url, resp.StatusCode, n)
		}
	}
	type path struct {
		name        string
		write, read func() []time.Duration
	}
	httpPath := func(name, route, writeMethod, ctype string, bearer bool) path {
		url := a.url + route + "?path=" + dir + "/" + name
		return path{name,
			func() []time.Duration {
				return timed(filesPerRound, func() { call(writeMethod, url, ctype, data, bearer) })
			},
			func() []time.Duration { return timed(filesPerRound, func() { call("GET", url, "", nil, bearer) }) },
		}
	}
	node := startNode(b, a)
	sdkFile, nodeFile := dir+"/envd-sdk", dir+"/native-node"
	form, formType := multipartFile(b, data)
	multi := httpPath("envd-http-multipart", "/files", "POST", formType, false)
	multi.write = func() []time.Duration {
		return timed(filesPerRound, func() { call("POST", a.url+"/files?path="+dir+"/multi", formType, form, false) })
	}
	multi.read = func() []time.Duration { return nil }
	paths := []path{
		httpPath("native", "/v1/files", "PUT", "", true),
		httpPath("envd-http", "/files", "POST", "application/octet-stream", false),
		multi,
		{"native-node",
			func() []time.Duration {
				return nodeBench(b, node, "native-write", benchFile, nodeFile, strconv.Itoa(filesPerRound))
			},
			func() []time.Duration {
				return nodeBench(b, node, "native-read", benchFile, nodeFile, strconv.Itoa(filesPerRound))
			},
		},
		{"envd-sdk",
			func() []time.Duration {
				return nodeBench(b, node, "write", benchFile, sdkFile, strconv.Itoa(filesPerRound))
			},
			func() []time.Duration {
				return nodeBench(b, node, "read", benchFile, sdkFile, strconv.Itoa(filesPerRound))
			},
		},
	}
	writes := make([][]time.Duration, len(paths))
	reads := make([][]time.Duration, len(paths))
	for range b.N * filesRounds {
		for i, p := range paths {
			writes[i] = append(writes[i], p.write()...)
			reads[i] = append(reads[i], p.read()...)
		}
	}
	p50 := map[string]time.Duration{}
	for i, p := range paths {
		p50[p.name+"-write"] = reportP50(b, p.name+"-write", writes[i])
		if len(reads[i]) > 0 {
			p50[p.name+"-read"] = reportP50(b, p.name+"-read", reads[i])
		}
	}
	ratio := func(name, of, base string) {
		b.ReportMetric(float64(p50[of])/float64(p50[base]), name)
	}
	for _, op := range []string{"write", "read"} {
		ratio("envd-http-"+op+"/native", "envd-http-"+op, "native-"+op)
		ratio("envd-sdk-"+op+"/native-node", "envd-sdk-"+op, "native-node-"+op)
	}
	ratio("envd-http-multipart-write/native", "envd-http-multipart-write", "native-write")
	b.ReportMetric(0, "ns/op")
}

// multipartFile is a form carrying data as the part "file", as the SDK's
// files.write sends it.
func multipartFile(b *testing.B, data []byte) ([]byte, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	w, err := mw.CreateFormFile("file", "blob")
	if err != nil {
		b.Fatal(err)
	}
	w.Write(data)
	mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}
