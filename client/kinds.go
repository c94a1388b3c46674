package client

import "github.com/rayito/rayito-agent/internal/wire"

// Protocol sizes the client relies on.
const (
	defaultWindow = 1 << 20 // the agent's default window per byte channel
	maxPayload    = wire.MaxPayload
)

// Kind is what a stream is.
type Kind string

const (
	KindProcess   Kind = "process"
	KindPTY       Kind = "pty"
	KindWatch     Kind = "watch"
	KindCell      Kind = "cell"
	KindChannels  Kind = "kernel_channels"
	KindFileRead  Kind = "file_read"
	KindFileWrite Kind = "file_write"
)

// Reason is why a stream, or one attachment to it, ended.
type Reason string

const (
	ReasonExit   Reason = "exit"
	ReasonDone   Reason = "done"
	ReasonClosed Reason = "closed"
	ReasonResume Reason = "resume"
	ReasonError  Reason = "error"
	// ReasonOOMKilled: the kernel's OOM killer ended the process (signal
	// SIGKILL); Wait answers an ExitStatus with OOMKilled set.
	ReasonOOMKilled Reason = "oom_killed"
)

// End is how a stream ended, from the agent's end event.
type End struct {
	Reason         Reason            `json:"reason"`
	ExitCode       *int              `json:"exit_code"`       // exit
	Signal         string            `json:"signal"`          // exit: the signal's name, "" for none
	Status         string            `json:"status"`          // done: ok, error, aborted
	ExecutionCount *int              `json:"execution_count"` // done
	Message        string            `json:"message"`
	Cursors        map[string]uint64 `json:"cursors"`
	// Code is the protocol error code of a failed file transfer.
	Code Code `json:"code"`
	// Size is a file transfer's byte count; SHA256 (hex), Path and
	// Created describe the file an upload committed.
	Size    *int64 `json:"size"`
	SHA256  string `json:"sha256"`
	Path    string `json:"path"`
	Created bool   `json:"created"`
}

// channelsOf lists a kind's byte channels and whether it has an event
// channel.
func channelsOf(k Kind) ([]byte, bool) {
	switch k {
	case KindProcess:
		return []byte{wire.ChanStdout, wire.ChanStderr}, false
	case KindPTY:
		return []byte{wire.ChanPTY}, false
	case KindFileRead:
		return []byte{wire.ChanData}, false
	case KindWatch, KindCell, KindChannels, KindFileWrite:
		return nil, true
	}
	return nil, false
}
