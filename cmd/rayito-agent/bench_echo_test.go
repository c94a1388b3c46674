package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/wire"
)

// echoProgram echoes each byte it reads on a raw terminal, once it said
// READY: a keystroke's round trip through a program, as in an editor.
var echoProgram = []string{"/bin/sh", "-c", "stty raw -echo && printf READY && exec cat"}

// echoBlock is how many echoes of one kind run before the next kind's.
const echoBlock = 50

// BenchmarkAgentPTYEcho is a keystroke's round trip through a program on
// a terminal of an agent process, with bare frames and with the SDK,
// against its floor measured in the same run: the same program on a
// local terminal in this process, plus one websocket request/response to
// the same agent (`list`). Each op runs every kind once, in blocks of
// echoBlock. The goal: `bare/floor` at most 1.3; `sdk-adds-µs` is the
// SDK's own share. The agent's context switches per op (its threads put to
// sleep and woken) count the hand-offs that make up most of its share.
func BenchmarkAgentPTYEcho(b *testing.B) {
	a := startAgentProc(b)
	master := localEcho(b)
	rc := a.raw(b)
	echo := rc.startEcho()
	c := a.dial(b)
	ctx := context.Background()
	p, err := c.PTY(ctx, client.PTYOptions{Argv: echoProgram})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Signal(ctx, client.SIGKILL)
	if err := readUntil(p.Output(), "READY"); err != nil {
		b.Fatal(err)
	}
	in, out := []byte{0}, make([]byte, 1)
	key := byte('a')
	next := func() byte {
		key = 'a' + (key-'a'+1)%26
		return key
	}
	loop := func(w io.Writer, r io.Reader) func() {
		return func() {
			in[0] = next()
			if _, err := w.Write(in); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(r, out); err != nil || out[0] != in[0] {
				b.Fatalf("echo %q of %q: %v", out, in, err)
			}
		}
	}
	kinds := []struct {
		name string
		one  func()
	}{
		{"local", loop(master, master)},
		{"websocket", func() { rc.call("list", `"kind":"watch"`) }},
		{"bare", func() { echo(next()) }},
		{"sdk", loop(p, p.Output())},
	}
	lat := make([][]time.Duration, len(kinds))
	var switches [4]int // the agent's context switches, per kind
	b.ResetTimer()
	for done := 0; done < b.N; done += echoBlock {
		n := min(echoBlock, b.N-done)
		for i, k := range kinds {
			sw := a.switches(b)
			lat[i] = append(lat[i], timeEach(n, k.one)...)
			switches[i] += a.switches(b) - sw
		}
	}
	b.StopTimer()
	for i, k := range kinds[1:] {
		b.ReportMetric(float64(switches[i+1])/float64(b.N), k.name+"-agent-switches/op")
	}
	p50 := map[string]float64{}
	for i, k := range kinds {
		p50[k.name] = micros(quantile(lat[i], 0.5))
		b.ReportMetric(p50[k.name], k.name+"-p50-µs")
	}
	floor := p50["local"] + p50["websocket"]
	b.ReportMetric(floor, "floor-µs")
	b.ReportMetric(p50["bare"]/floor, "bare/floor")
	b.ReportMetric(p50["sdk"]/floor, "sdk/floor")
	b.ReportMetric(p50["sdk"]-p50["bare"], "sdk-adds-µs")
}

// localEcho runs echoProgram on a local terminal and returns its master
// once the program is ready; it is killed at cleanup.
func localEcho(b *testing.B) *os.File {
	cmd := exec.Command(echoProgram[0], echoProgram[1:]...)
	master, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		master.Close()
	})
	if err := readUntil(master, "READY"); err != nil {
		b.Fatal(err)
	}
	return master
}

// readUntil reads r until the bytes read end with want.
func readUntil(r io.Reader, want string) error {
	var got []byte
	buf := make([]byte, 64)
	for !bytes.HasSuffix(got, []byte(want)) {
		n, err := r.Read(buf)
		if err != nil {
			return fmt.Errorf("after %q: %w", got, err)
		}
		got = append(got, buf[:n]...)
	}
	return nil
}

// startEcho starts echoProgram on an agent terminal with bare frames and
// returns a function that types one key and waits for its echo.
func (rc *rawConn) startEcho() func(key byte) {
	req, _ := json.Marshal(echoProgram)
	id := rc.request("pty", `"argv":`+string(req))
	var stream uint64
	var out []byte
	for !bytes.HasSuffix(out, []byte("READY")) {
		typ, msg := rc.read()
		if typ == websocket.MessageBinary {
			d, err := wire.DecodeData(msg)
			if err != nil {
				rc.tb.Fatal(err)
			}
			out = append(out, d.Payload...)
			continue
		}
		if m := rc.decode(msg); m.ID == id {
			stream = m.Result.Stream
		}
	}
	frame := make([]byte, 0, 32)
	return func(key byte) {
		frame = wire.AppendData(frame[:0], wire.Data{Type: wire.In, Stream: stream, Payload: []byte{key}})
		if err := rc.ws.Write(rc.ctx, websocket.MessageBinary, frame); err != nil {
			rc.tb.Fatal(err)
		}
		for {
			typ, msg := rc.read()
			if typ != websocket.MessageBinary {
				continue // the response to an earlier list, an ack's...
			}
			if d, err := wire.DecodeData(msg); err != nil || len(d.Payload) != 1 || d.Payload[0] != key {
				rc.tb.Fatalf("echo %q of %q: %v", msg, key, err)
			}
			return
		}
	}
}
