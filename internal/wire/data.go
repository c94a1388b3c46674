package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FrameType is the first byte of a binary data frame.
type FrameType byte

const (
	// Out carries stream output from the agent to a client.
	Out FrameType = 0x01
	// In carries input (stdin or pty keystrokes) from a client to the agent.
	In FrameType = 0x02
	// InAt is In with the offset of its first byte in the stream's input:
	// the agent writes every input byte once and in order whatever
	// connection brings it, drops what it already has, and refuses a frame
	// that would leave a gap (protocol section 5). Agents that say
	// input_offsets in their hello take it.
	InAt FrameType = 0x03
)

// Channel numbers used inside data frames.
const (
	ChanInput  byte = 0 // IN frames: stdin or pty input
	ChanStdout byte = 1
	ChanStderr byte = 2
	ChanPTY    byte = 3
	ChanData   byte = 4 // a file's content (file_read)
)

// Size limits of the protocol.
const (
	// MaxControl is the largest control frame, in bytes.
	MaxControl = 1 << 20
	// MaxPayload is the largest data frame payload; producers split larger
	// output so that one frame never exceeds it.
	MaxPayload = 1 << 20
	// MaxDataHeader bounds the header of a data frame: type, two uvarints
	// of at most 10 bytes and the channel byte.
	MaxDataHeader = 1 + binary.MaxVarintLen64 + 1 + binary.MaxVarintLen64
	// MaxMessage is the largest websocket message either side accepts.
	MaxMessage = MaxPayload + MaxDataHeader
)

var (
	ErrShort       = errors.New("wire: data frame truncated")
	ErrFrameType   = errors.New("wire: unknown data frame type")
	ErrChannel     = errors.New("wire: channel not valid for frame type")
	ErrTooLarge    = errors.New("wire: payload larger than 1 MiB")
	ErrVarint      = errors.New("wire: malformed uvarint")
	ErrOffsetRange = errors.New("wire: offset plus payload overflows")
)

// Data is a decoded binary frame. Payload aliases the decoded message.
type Data struct {
	Type    FrameType
	Stream  uint64
	Channel byte
	Offset  uint64 // OUT and InAt frames
	Payload []byte
}

// AppendData appends the encoding of d to dst and returns the extended slice.
// Offset is written only for OUT and InAt frames, as the protocol says.
func AppendData(dst []byte, d Data) []byte {
	dst = append(dst, byte(d.Type))
	dst = binary.AppendUvarint(dst, d.Stream)
	dst = append(dst, d.Channel)
	if d.Type == Out || d.Type == InAt {
		dst = binary.AppendUvarint(dst, d.Offset)
	}
	return append(dst, d.Payload...)
}

// AppendOutHeader appends just the header of an OUT frame, so a caller can
// copy the payload straight after it without an intermediate buffer.
func AppendOutHeader(dst []byte, stream uint64, channel byte, offset uint64) []byte {
	dst = append(dst, byte(Out))
	dst = binary.AppendUvarint(dst, stream)
	dst = append(dst, channel)
	return binary.AppendUvarint(dst, offset)
}

// DecodeData parses a binary message. It rejects anything the protocol does
// not allow instead of guessing, so a bad client gets a precise error.
func DecodeData(msg []byte) (Data, error) {
	var d Data
	if len(msg) < 3 {
		return d, ErrShort
	}
	d.Type = FrameType(msg[0])
	if d.Type != Out && d.Type != In && d.Type != InAt {
		return d, fmt.Errorf("%w: 0x%02x", ErrFrameType, msg[0])
	}
	rest := msg[1:]
	var n int
	if d.Stream, n = binary.Uvarint(rest); n <= 0 {
		return d, fmt.Errorf("%w: stream id", ErrVarint)
	}
	rest = rest[n:]
	if len(rest) < 1 {
		return d, ErrShort
	}
	d.Channel = rest[0]
	rest = rest[1:]
	switch d.Type {
	case In, InAt:
		if d.Channel != ChanInput {
			return d, fmt.Errorf("%w: IN on channel %d", ErrChannel, d.Channel)
		}
	case Out:
		if d.Channel < ChanStdout || d.Channel > ChanData {
			return d, fmt.Errorf("%w: OUT on channel %d", ErrChannel, d.Channel)
		}
	}
	if d.Type == Out || d.Type == InAt {
		if d.Offset, n = binary.Uvarint(rest); n <= 0 {
			return d, fmt.Errorf("%w: offset", ErrVarint)
		}
		rest = rest[n:]
		if d.Offset+uint64(len(rest)) < d.Offset {
			return d, ErrOffsetRange
		}
	}
	if len(rest) > MaxPayload {
		return d, ErrTooLarge
	}
	d.Payload = rest
	return d, nil
}

// ChannelName maps a data channel number to the name used in JSON cursors.
func ChannelName(ch byte) string {
	switch ch {
	case ChanStdout:
		return "stdout"
	case ChanStderr:
		return "stderr"
	case ChanPTY:
		return "pty"
	case ChanData:
		return "data"
	}
	return ""
}

// ChannelNumber is the inverse of ChannelName; ok is false for names that are
// not byte channels (such as "events").
func ChannelNumber(name string) (byte, bool) {
	switch name {
	case "stdout":
		return ChanStdout, true
	case "stderr":
		return ChanStderr, true
	case "pty":
		return ChanPTY, true
	case "data":
		return ChanData, true
	}
	return 0, false
}
