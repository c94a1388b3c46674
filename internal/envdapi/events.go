package envdapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/stream"
)

// maxChunk is the most output one data event carries. Each event costs an
// envelope, but a larger one costs the e2b SDK more: 64 KiB moved 1.6x the
// bytes per second of 256 KiB through it, with no change for Go clients
// (docs/benchmarks.md).
const maxChunk = 64 << 10

// Keepalives: the SDK asks for one every Keepalive-Ping-Interval seconds
// of silence (it sends 50); without the header, envd's own default.
const (
	keepaliveHeader  = "Keepalive-Ping-Interval"
	defaultKeepalive = 90 * time.Second
	minKeepalive     = time.Second
	// maxKeepalive bounds the interval asked for, far below where its
	// nanoseconds overflow (and wrap to some other interval).
	maxKeepalive = time.Hour
)

func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get(keepaliveHeader)); err == nil && n > 0 {
		return max(time.Duration(min(n, int(maxKeepalive/time.Second)))*time.Second, minKeepalive)
	}
	return defaultKeepalive
}

// pumpProcess streams a command or terminal as envd's events: start, the
// output from the cursors from (nil: the beginning), then the end. Output
// is acknowledged once sent, so the stream's flow control follows this
// client while it is connected. lifetime says the request's deadline is
// the process's, so an end after it is deadline_exceeded.
func (s *Server) pumpProcess(ctx context.Context, st *stream.Stream, from map[string]uint64,
	send func(*process.ProcessEvent) error, keepalive time.Duration, lifetime bool) error {
	att, err := st.Attach(from, stream.DefaultWindow)
	if err != nil {
		return connectError(err)
	}
	defer att.Close()
	c := callFrom(ctx)
	c.onCut(func() { att.CutAfter(stream.End{Reason: stream.ReasonResume}) })

	start := &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(st.Pid)}}
	if err := send(&process.ProcessEvent{Event: start}); err != nil {
		return err
	}
	buf := make([]byte, 0, maxChunk)
	for {
		item, err := nextItem(ctx, att, buf, keepalive)
		switch {
		case errors.Is(err, errQuiet):
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			continue
		case err != nil && ctx.Err() != nil:
			return streamContextError(ctx)
		case err != nil:
			return connectError(err)
		}
		switch item.Kind {
		case stream.ItemData:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: dataEvent(item)}}); err != nil {
				return err
			}
			att.Ack(map[string]uint64{item.Channel: item.Offset + uint64(len(item.Data))})
		case stream.ItemEnd:
			if item.End.Reason == stream.ReasonResume {
				return resumeError(c.cutBy(), fmt.Sprintf("connect to process %d again", st.Pid))
			}
			if d, ok := ctx.Deadline(); lifetime && ok && !time.Now().Before(d) {
				return errDeadline()
			}
			end := &process.ProcessEvent_End{End: endEvent(item.End)}
			return send(&process.ProcessEvent{Event: end})
		}
		// A gap (output of a drop-policy stream that nobody read in
		// time) has no envd event; the data after it follows.
	}
}

// errQuiet is nextItem's answer when the stream said nothing for a whole
// keepalive interval.
var errQuiet = errors.New("no output for a keepalive interval")

// nextItem waits for the attachment's next item, up to one keepalive
// interval; buf is reused for the data.
func nextItem(ctx context.Context, att *stream.Attachment, buf []byte, keepalive time.Duration) (stream.Item, error) {
	kctx, cancel := context.WithTimeout(ctx, keepalive)
	defer cancel()
	item, err := att.Next(kctx, buf[:0], maxChunk)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return item, errQuiet
	}
	return item, err
}

func dataEvent(item stream.Item) *process.ProcessEvent_DataEvent {
	ev := &process.ProcessEvent_DataEvent{}
	switch item.Channel {
	case "stderr":
		ev.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: item.Data}
	case ptymux.Channel:
		ev.Output = &process.ProcessEvent_DataEvent_Pty{Pty: item.Data}
	default:
		ev.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: item.Data}
	}
	return ev
}

// endEvent says how a process ended in envd's words, which are Go's
// os.ProcessState's: "exit status 3", "signal: killed". A non-zero exit,
// a signal and an agent error also fill error, and a process killed by a
// signal has exit code -1.
func endEvent(e stream.End) *process.ProcessEvent_EndEvent {
	ev := &process.ProcessEvent_EndEvent{ExitCode: -1}
	switch {
	case e.Reason == stream.ReasonExit && e.ExitCode != nil:
		ev.ExitCode, ev.Exited = int32(*e.ExitCode), true
		ev.Status = fmt.Sprintf("exit status %d", *e.ExitCode)
	case e.Reason == stream.ReasonExit:
		ev.Status = "signal: " + signalText(e.Signal)
	case e.Reason == stream.ReasonOOMKilled:
		// envd's words for the signal, and why, in error.
		ev.Status = "signal: " + signalText(e.Signal)
		msg := string(e.Reason) + ": " + e.Message
		ev.Error = &msg
		return ev
	default:
		ev.Status = e.Message
		if ev.Status == "" {
			ev.Status = string(e.Reason)
		}
	}
	if !ev.Exited || ev.ExitCode != 0 {
		ev.Error = &ev.Status
	}
	return ev
}

// signalText is a signal's description ("killed" for SIGKILL), or its
// name when the system does not know it.
func signalText(name string) string {
	if n := unix.SignalNum(name); n != 0 {
		return syscall.Signal(n).String()
	}
	return name
}
