package main

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

// outputBytes is what each command of the output benchmark writes.
const outputBytes = 256 << 20

var outputArgv = []string{"head", "-c", strconv.Itoa(outputBytes), "/dev/zero"}

// BenchmarkAgentOutput is the stdout of `head -c 256MiB /dev/zero` read
// through an agent process (with the SDK, and with bare frames), against
// the same command's stdout read from a pipe in this process and through
// the floor (bench_floor_test.go: the least a Go websocket agent does to
// send it), in the same run. Each op runs all four, in turn. Metrics: MiB/s of each (median
// over the ops) and the median of each op's ratio to the pipe (the goal
// is at least 0.5); and the CPU time every process involved spent per MiB
// (this one, the agent, and the command), which a loaded machine
// disturbs far less than the rate.
func BenchmarkAgentOutput(b *testing.B) {
	a := startAgentProc(b)
	c := a.dial(b)
	rc := a.raw(b)
	fl := startFloor(b)
	buf := make([]byte, 1<<20)
	frames := 0 // data frames the bare client got
	kinds := []struct {
		name string
		run  func()
	}{
		{"pipe", func() { pipeRead(b, buf) }},
		{"sdk", func() { readAll(b, c, outputArgv, outputBytes) }},
		{"bare", func() {
			n, f := rc.readOutput(outputArgv, 1<<20)
			if n != outputBytes {
				b.Fatal(n)
			}
			frames += f
		}},
		{"floor", func() {
			if n := fl.readOutput(b, buf); n != outputBytes {
				b.Fatal(n)
			}
		}},
	}
	rates := make([][]float64, len(kinds))
	cpu := make([][]float64, len(kinds)) // ms of CPU per MiB, all processes
	b.SetBytes(outputBytes * int64(len(kinds)))
	b.ResetTimer()
	for i := range b.N {
		for j := range kinds {
			k := (i + j) % len(kinds) // rotate who goes first
			cpu0 := ownCPU() + a.cpu(b) + fl.proc.cpu(b)
			start := time.Now()
			kinds[k].run()
			rates[k] = append(rates[k], float64(outputBytes)/(1<<20)/time.Since(start).Seconds())
			cpu[k] = append(cpu[k], float64((ownCPU()+a.cpu(b)+fl.proc.cpu(b)-cpu0).Milliseconds())/(outputBytes>>20))
		}
	}
	b.StopTimer()
	for k, kind := range kinds {
		b.ReportMetric(median(rates[k]), kind.name+"-MiB/s")
		b.ReportMetric(median(cpu[k]), kind.name+"-CPU-ms/MiB")
	}
	b.ReportMetric(float64(outputBytes)*float64(b.N)/float64(frames)/1024, "bare-KiB/frame")
	for k, kind := range kinds[1:] {
		ratios := make([]float64, len(rates[0]))
		for i := range ratios {
			ratios[i] = rates[k+1][i] / rates[0][i]
		}
		b.ReportMetric(median(ratios), kind.name+"/pipe")
	}
	for k, kind := range kinds[1:3] {
		ratios := make([]float64, len(rates[0]))
		for i := range ratios {
			ratios[i] = rates[k+1][i] / rates[3][i]
		}
		b.ReportMetric(median(ratios), kind.name+"/floor")
	}
}

// pipeRead runs the command with its stdout on a pipe and reads it all.
func pipeRead(b *testing.B, buf []byte) {
	pr, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(outputArgv[0], outputArgv[1:]...)
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pw.Close()
	total := 0
	for {
		n, err := pr.Read(buf)
		total += n
		if err != nil {
			break
		}
	}
	pr.Close()
	if err := cmd.Wait(); err != nil || total != outputBytes {
		b.Fatal(total, err)
	}
}

// readOutput execs argv with bare frames and reads its stdout to the end,
// acknowledging every half window as the SDK does. It returns the bytes
// and the data frames they came in.
func (rc *rawConn) readOutput(argv []string, window int) (int, int) {
	params := `"argv":[`
	for i, a := range argv {
		if i > 0 {
			params += ","
		}
		params += strconv.Quote(a)
	}
	id := rc.request("exec", params+"]")
	var stream uint64
	total, acked, frames := 0, 0, 0
	ack := make([]byte, 0, 96)
	for {
		typ, msg := rc.read()
		if typ == websocket.MessageBinary {
			d, err := wire.DecodeData(msg)
			if err != nil || d.Stream != stream {
				rc.tb.Fatal(d.Stream, err)
			}
			if d.Channel == wire.ChanStdout {
				total += len(d.Payload)
				frames++
			}
			if total-acked >= window/2 {
				ack = append(ack[:0], `{"op":"ack","stream":`...)
				ack = strconv.AppendUint(ack, stream, 10)
				ack = append(ack, `,"cursors":{"stdout":`...)
				ack = strconv.AppendInt(ack, int64(total), 10)
				ack = append(ack, "}}"...)
				rc.send(ack)
				acked = total
			}
			continue
		}
		m := rc.decode(msg)
		switch {
		case m.ID == id:
			stream = m.Result.Stream
		case m.Event == "end" && m.Stream == stream:
			return total, frames
		}
	}
}
