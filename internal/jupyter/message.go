package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"
)

// channel names one of a kernel's sockets.
type channel string

const (
	chShell     channel = "shell"
	chControl   channel = "control"
	chStdin     channel = "stdin"
	chIOPub     channel = "iopub"
	chHeartbeat channel = "hb"
)

const (
	// delimiter separates routing identities from the signed parts.
	delimiter = "<IDS|MSG>"
	// protocolVersion is the Jupyter messaging version we speak.
	protocolVersion = "5.3"
	// username goes into the headers of the messages the agent writes.
	username = "rayito-agent"
)

var (
	errBadSignature = errors.New("jupyter: bad message signature")
	errMalformed    = errors.New("jupyter: malformed message")
)

// message is one Jupyter message. The JSON parts stay raw so that relaying
// a message never re-encodes it; the few header fields the agent routes on
// are parsed once.
type message struct {
	Header   json.RawMessage
	Parent   json.RawMessage
	Metadata json.RawMessage
	Content  json.RawMessage
	Buffers  [][]byte

	MsgID    string
	MsgType  string
	ParentID string
}

type header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// routing is the part of a header the agent needs.
type routing struct {
	MsgID   string `json:"msg_id"`
	MsgType string `json:"msg_type"`
}

// newMessage builds a message of the agent's own. parent may be nil.
func newMessage(session, msgType string, parent json.RawMessage, content any) (*message, error) {
	id := newID()
	h, err := json.Marshal(header{
		MsgID: id, Session: session, Username: username,
		Date: timestamp(), MsgType: msgType, Version: protocolVersion,
	})
	if err != nil {
		return nil, err
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, err
	}
	if len(parent) == 0 {
		parent = json.RawMessage("{}")
	}
	return &message{Header: h, Parent: parent, Metadata: json.RawMessage("{}"), Content: c, MsgID: id, MsgType: msgType}, nil
}

func timestamp() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z") }

// newID returns a random UUID-shaped id, as Jupyter uses for msg_id.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("jupyter: no randomness: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// signer signs and verifies messages with one kernel's HMAC-SHA256 key.
// Safe for concurrent use.
type signer struct {
	key  []byte
	pool sync.Pool // of hash.Hash, since every message needs one
}

func newSigner(key string) *signer {
	s := &signer{key: []byte(key)}
	s.pool.New = func() any { return hmac.New(sha256.New, s.key) }
	return s
}

func (s *signer) mac(parts ...[]byte) []byte {
	h := s.pool.Get().(hash.Hash)
	defer s.pool.Put(h)
	h.Reset()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// encode returns the frames of m: delimiter, signature, the four JSON parts
// and the buffers. A DEALER sends them as they are; the kernel's ROUTER
// adds our identity.
func (s *signer) encode(m *message) [][]byte {
	sig := make([]byte, hex.EncodedLen(sha256.Size))
	hex.Encode(sig, s.mac(m.Header, m.Parent, m.Metadata, m.Content))
	frames := make([][]byte, 0, 6+len(m.Buffers))
	frames = append(frames, []byte(delimiter), sig, m.Header, m.Parent, m.Metadata, m.Content)
	return append(frames, m.Buffers...)
}

// decode verifies and parses the frames of a received message. Identities
// (or an iopub topic) before the delimiter are ignored.
func (s *signer) decode(frames [][]byte) (*message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], []byte(delimiter)) {
		i++
	}
	rest := frames[min(i+1, len(frames)):]
	if i == len(frames) || len(rest) < 5 {
		return nil, fmt.Errorf("%w: %d frames, delimiter at %d", errMalformed, len(frames), i)
	}
	sig := make([]byte, hex.DecodedLen(len(rest[0])))
	if _, err := hex.Decode(sig, rest[0]); err != nil || !hmac.Equal(sig, s.mac(rest[1], rest[2], rest[3], rest[4])) {
		return nil, errBadSignature
	}
	m := &message{Header: rest[1], Parent: rest[2], Metadata: rest[3], Content: rest[4], Buffers: rest[5:]}
	var h, p routing
	if err := json.Unmarshal(m.Header, &h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", errMalformed, err)
	}
	if err := json.Unmarshal(m.Parent, &p); err != nil {
		return nil, fmt.Errorf("%w: parent header: %v", errMalformed, err)
	}
	m.MsgID, m.MsgType, m.ParentID = h.MsgID, h.MsgType, p.MsgID
	return m, nil
}

// content holds the fields of every message content the agent reads.
type content struct {
	Name           string          `json:"name"`
	Text           string          `json:"text"`
	Data           json.RawMessage `json:"data"`
	ExecutionCount *int            `json:"execution_count"`
	EName          string          `json:"ename"`
	EValue         string          `json:"evalue"`
	Traceback      []string        `json:"traceback"`
	ExecutionState string          `json:"execution_state"`
	Status         string          `json:"status"`
	Prompt         string          `json:"prompt"`
	Password       bool            `json:"password"`
}

func (m *message) content() (content, error) {
	var c content
	err := json.Unmarshal(m.Content, &c)
	return c, err
}

// marshalContent is json.Marshal for contents the agent builds.
func marshalContent(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
