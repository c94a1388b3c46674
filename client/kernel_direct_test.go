package client_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/rayito/rayito-agent/client"
)

// kernelConn is what a Jupyter connection file holds.
type kernelConn struct {
	IP        string `json:"ip"`
	ShellPort int    `json:"shell_port"`
	IOPubPort int    `json:"iopub_port"`
	Key       string `json:"key"`
}

// kernelConnection reads the connection file of a kernel the agent runs,
// found on its command line (`-f FILE`): the benchmark's baseline talks
// to the very same kernel.
func kernelConnection(b *testing.B, c *client.Client, id string) kernelConn {
	ks, err := c.Kernels(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range ks {
		if k.Kernel != id {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k.Pid))
		if err != nil {
			b.Fatal(err)
		}
		args := strings.Split(string(cmdline), "\x00")
		for i, a := range args {
			if a == "-f" && i+1 < len(args) {
				var kc kernelConn
				raw, err := os.ReadFile(args[i+1])
				if err == nil {
					err = json.Unmarshal(raw, &kc)
				}
				if err != nil {
					b.Fatal(err)
				}
				return kc
			}
		}
		b.Fatalf("kernel %s: no -f in %q", id, args)
	}
	b.Fatalf("no kernel %s in %+v", id, ks)
	return kernelConn{}
}

// zmqKernel is the baseline client: one DEALER for shell, one SUB for
// iopub, a receiving goroutine for each (zmq4's Recv has no timeout).
type zmqKernel struct {
	key     []byte
	session string
	shell   zmq4.Socket
	iopub   zmq4.Socket
	msgs    chan [][]byte
}

func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func dialKernel(b *testing.B, kc kernelConn) *zmqKernel {
	ctx, cancel := context.WithCancel(context.Background())
	d := &zmqKernel{key: []byte(kc.Key), session: randomID(), msgs: make(chan [][]byte, 64)}
	d.shell = zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity(d.session)))
	d.iopub = zmq4.NewSub(ctx)
	d.iopub.SetOption(zmq4.OptionSubscribe, "")
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		d.shell.Close()
		d.iopub.Close()
		wg.Wait()
	})
	for _, s := range []struct {
		sock zmq4.Socket
		port int
	}{{d.shell, kc.ShellPort}, {d.iopub, kc.IOPubPort}} {
		if err := s.sock.Dial(fmt.Sprintf("tcp://%s:%d", kc.IP, s.port)); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for misses := 0; misses < 64; {
				m, err := s.sock.Recv()
				if err != nil {
					// After Close, drain until zmq4 stops handing out
					// queued messages, or its reader leaks.
					if ctx.Err() != nil {
						misses++
					}
					continue
				}
				select {
				case d.msgs <- m.Frames:
				case <-ctx.Done():
				}
			}
		}()
	}
	// The subscription is live once a status from our kernel_info
	// request arrives.
	for live := false; !live; {
		id := d.send(b, "kernel_info_request", map[string]any{})
		deadline := time.After(200 * time.Millisecond)
	wait:
		for {
			select {
			case f := <-d.msgs:
				if typ, parent := d.decode(f); strings.HasPrefix(typ, "status:") && parent == id {
					live = true
					break wait
				}
			case <-deadline:
				break wait
			}
		}
	}
	return d
}

func (d *zmqKernel) sign(parts ...[]byte) []byte {
	h := hmac.New(sha256.New, d.key)
	for _, p := range parts {
		h.Write(p)
	}
	return []byte(hex.EncodeToString(h.Sum(nil)))
}

// send signs and sends a shell request; it returns its msg_id.
func (d *zmqKernel) send(b *testing.B, msgType string, content any) string {
	id := randomID()
	header, _ := json.Marshal(map[string]string{
		"msg_id": id, "session": d.session, "username": "bench", "msg_type": msgType, "version": "5.3",
		"date": time.Now().UTC().Format(time.RFC3339Nano),
	})
	body, _ := json.Marshal(content)
	parent, meta := []byte("{}"), []byte("{}")
	frames := [][]byte{[]byte("<IDS|MSG>"), d.sign(header, parent, meta, body), header, parent, meta, body}
	if err := d.shell.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		b.Fatal(err)
	}
	return id
}

// decode returns a message's type and its parent's msg_id; the signature
// is checked, as a real client must.
func (d *zmqKernel) decode(frames [][]byte) (msgType, parent string) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], []byte("<IDS|MSG>")) {
		i++
	}
	if len(frames) < i+6 || !hmac.Equal(frames[i+1], d.sign(frames[i+2:i+6]...)) {
		return "", ""
	}
	var h struct {
		MsgType string `json:"msg_type"`
		MsgID   string `json:"msg_id"`
	}
	json.Unmarshal(frames[i+2], &h)
	msgType = h.MsgType
	json.Unmarshal(frames[i+3], &h)
	if msgType == "status" {
		var c struct {
			State string `json:"execution_state"`
		}
		json.Unmarshal(frames[i+5], &c)
		msgType += ":" + c.State
	}
	return msgType, h.MsgID
}

// execute runs code and waits for its execute_reply and idle status.
func (d *zmqKernel) execute(b *testing.B, code string) {
	id := d.send(b, "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false,
	})
	timeout := time.NewTimer(kernelWait)
	defer timeout.Stop()
	for replied, idle := false, false; !replied || !idle; {
		select {
		case f := <-d.msgs:
			switch typ, parent := d.decode(f); {
			case parent != id:
			case typ == "execute_reply":
				replied = true
			case typ == "status:idle":
				idle = true
			}
		case <-timeout.C:
			b.Fatal("no reply from the kernel")
		}
	}
}
