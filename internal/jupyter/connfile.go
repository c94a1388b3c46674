package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// loopback is where kernels listen: never reachable from outside the VM.
const loopback = "127.0.0.1"

// connInfo is the content of a Jupyter connection file.
type connInfo struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name"`
}

// newConnInfo picks five free loopback ports and a fresh key. The ports
// are bound all at once and held until all five are chosen, so they are
// distinct and were free a moment ago; a process that takes one before the
// kernel binds it makes the kernel fail with EADDRINUSE, which the caller
// answers by trying again with new ports.
func newConnInfo(kernelName string) (connInfo, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 5)
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return connInfo{}, fmt.Errorf("pick a port: %w", err)
		}
		held = append(held, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return connInfo{}, fmt.Errorf("make a key: %w", err)
	}
	return connInfo{
		Transport: "tcp", IP: loopback,
		ShellPort: ports[0], IOPubPort: ports[1], StdinPort: ports[2], ControlPort: ports[3], HBPort: ports[4],
		Key: hex.EncodeToString(key[:]), SignatureScheme: "hmac-sha256", KernelName: kernelName,
	}, nil
}

func (c connInfo) endpoint(port int) string {
	return fmt.Sprintf("%s://%s", c.Transport, net.JoinHostPort(c.IP, fmt.Sprint(port)))
}

// write stores the connection file in its own directory, readable only by
// the kernel's user: the key in it lets anyone run code in the kernel.
func (c connInfo) write(path string, cred *syscall.Credential) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	if cred == nil {
		return nil
	}
	for _, p := range []string{filepath.Dir(path), path} {
		if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}
