package envdapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// The benchmarks compare the envd API with the native protocol on one
// agent in one run: through the e2b SDK (Node), through connect-go's own
// client speaking JSON as the SDK does, through a minimal client of the
// same wire format (stdout only), and through the native Go client. Commands run as nobody, so a login
// shell reads no user's profile; every path runs the same argv.
//
//	go test -run '^$' -bench EnvdVsNative -benchtime 1x ./internal/envdapi/

var trueArgv = []string{"/bin/bash", "-l", "-c", "true"}

// runsPerOp is how many commands one op of the run benchmark starts, so
// that one -benchtime serves both benchmarks.
const runsPerOp = 200

// benchThroughput is the stdout benchmark's size.
const benchThroughput = 256 << 20

func reportP50(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(0, "ns/op") // the loop's mean includes Node's start for the SDK
}

// nodeBench runs nodetest/bench.mjs and returns what it measured.
func nodeBench(b *testing.B, url, mode string, n int) []time.Duration {
	needNode(b)
	out, err := exec.Command("node", "nodetest/bench.mjs", url, mode, strconv.Itoa(n)).Output()
	if err != nil {
		b.Fatalf("node: %v %s", err, out)
	}
	var us []float64
	if err := json.Unmarshal(out, &us); err != nil {
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

func BenchmarkEnvdVsNativeRunTrue(b *testing.B) {
	a := newAgent(b, agentOptions{open: true, user: "nobody"})
	ctx := context.Background()
	b.Run("native", func(b *testing.B) {
		c := nativeClient(b, a)
		lat := make([]time.Duration, 0, b.N*runsPerOp)
		for range b.N * runsPerOp {
			start := time.Now()
			p, err := c.Exec(ctx, client.ExecOptions{Argv: trueArgv})
			if err != nil {
				b.Fatal(err)
			}
			if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
				b.Fatal(st, err)
			}
			lat = append(lat, time.Since(start))
		}
		reportP50(b, lat)
	})
	b.Run("envd-go", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N*runsPerOp)
		for range b.N * runsPerOp {
			start := time.Now()
			req := startReq("true")
			req.Msg.Process.Args = trueArgv[1:]
			s, err := a.pc.Start(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			if r := collect(s, nil); r.err != nil || r.end.GetExitCode() != 0 || !r.end.GetExited() {
				b.Fatal(r.err, r.end)
			}
			lat = append(lat, time.Since(start))
		}
		reportP50(b, lat)
	})
	b.Run("envd-sdk", func(b *testing.B) {
		reportP50(b, nodeBench(b, a.url, "run", b.N*runsPerOp))
	})
}

func BenchmarkEnvdVsNativeStdout(b *testing.B) {
	a := newAgent(b, agentOptions{open: true, user: "nobody"})
	ctx := context.Background()
	argv := []string{"head", "-c", strconv.Itoa(benchThroughput), "/dev/zero"}
	b.Run("native", func(b *testing.B) {
		c := nativeClient(b, a)
		b.SetBytes(benchThroughput)
		for range b.N {
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
		}
	})
	b.Run("envd-go", func(b *testing.B) {
		b.SetBytes(benchThroughput)
		for range b.N {
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
		}
	})
	b.Run("envd-wire", func(b *testing.B) {
		b.SetBytes(benchThroughput)
		body, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": argv[0], "args": argv[1:]}, "stdin": false})
		for range b.N {
			if n := rawStdout(b, a.url, body); n != benchThroughput {
				b.Fatal(n)
			}
		}
	})
	b.Run("envd-sdk", func(b *testing.B) {
		b.SetBytes(benchThroughput)
		var total time.Duration
		for range b.N {
			total += nodeBench(b, a.url, "stdout", benchThroughput)[0]
		}
		b.ReportMetric(float64(benchThroughput)*float64(b.N)/total.Seconds()/1e6, "MB/s")
	})
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
