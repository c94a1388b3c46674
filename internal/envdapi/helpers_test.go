package envdapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentpkg "github.com/rayito/rayito-agent/internal/agent"
	"github.com/rayito/rayito-agent/internal/agenttest"
	"github.com/rayito/rayito-agent/internal/endpoint"
	"github.com/rayito/rayito-agent/internal/envdapi"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem/filesystemconnect"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process/processconnect"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/traffic"
)

// waitLong bounds every wait for something that should happen soon; the
// machine may be busy, so it is generous.
const waitLong = 30 * time.Second

// nativeToken is the agent's token in every test agent.
const nativeToken = "envd-test-token"

// testReaper is the process's one reaper, the test agents' too.
func testReaper(t testing.TB) *proc.Reaper { return agenttest.Reaper(t) }

// agent is a real agent served in-process on 127.0.0.1:0: the native
// endpoint with the envd API mounted on it, over real managers.
type agent struct {
	url     string
	kit     *surface.Server
	cuts    *surface.Cuts
	streams *stream.Registry
	procs   *proc.Manager
	resume  *resume.Manager
	envd    *envdapi.Server
	counter *traffic.Counter
	files   *files.Manager
	pc      processconnect.ProcessClient
	fs      filesystemconnect.FilesystemClient
}

type agentOptions struct {
	open    bool // the unsafe open mode
	noToken bool // no token configured at all
	// smallBuffers shrinks the socket buffers of the server's connections
	// and of the clients, so that what a client has not read stays in the
	// agent's stream logs instead of in the kernel.
	smallBuffers bool
	// user is who processes run as when a request names nobody.
	user string
	// e2bAPI mounts the control plane (--e2b-api).
	e2bAPI bool
	// adminGroup is --admin-group: whose file operations run with the
	// agent's rights. "" is nogroup, nobody's: nobody plays E2B's user,
	// who has sudo. "none" leaves only root.
	adminGroup string
}

// smallBuffer is the socket buffer size of smallBuffers.
const smallBuffer = 128 << 10

func newAgent(t testing.TB, o agentOptions) *agent {
	var admin []string
	switch o.adminGroup {
	case "":
		admin = []string{"nogroup"}
	case "none":
	default:
		admin = []string{o.adminGroup}
	}
	token := nativeToken
	if o.noToken {
		token = ""
	}
	opts := agenttest.Options{Config: agentpkg.Config{
		Token: token, DefaultUser: o.user, AdminGroups: admin, EnvdOpen: o.open, E2BAPI: o.e2bAPI,
	}}
	httpClient := http.DefaultClient
	if o.smallBuffers {
		opts.Listener = func(l net.Listener) net.Listener { return smallListener{l} }
		httpClient = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil {
					c.(*net.TCPConn).SetReadBuffer(smallBuffer)
				}
				return c, err
			},
		}}
	}
	var envd *envdapi.Server
	opts.Mount = func(ag *agentpkg.Agent) {
		endpoint.Mount(ag.Capabilities())
		envd = envdapi.Mount(ag.Capabilities())
	}
	a := agenttest.New(t, opts)
	return &agent{
		url: a.URL, kit: a.Server, cuts: a.Cuts, streams: a.Streams, procs: a.Procs, resume: a.Resumer, envd: envd, counter: a.Counter, files: a.Files,
		pc: processconnect.NewProcessClient(httpClient, a.URL, sdkLike...),
		fs: filesystemconnect.NewFilesystemClient(httpClient, a.URL, sdkLike...),
	}
}

// smallListener gives accepted connections small send buffers.
type smallListener struct{ net.Listener }

func (l smallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		c.(*net.TCPConn).SetWriteBuffer(smallBuffer)
	}
	return c, err
}

// sdkLike makes Go clients speak as the e2b SDK does: JSON, and no
// compressed responses asked for.
var sdkLike = []connect.ClientOption{connect.WithProtoJSON(), connect.WithAcceptCompression("gzip", nil, nil)}

func ctxLong(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// authed sets the token as the SDK sends it.
func authed[T any](req *connect.Request[T]) *connect.Request[T] {
	req.Header().Set("X-Access-Token", nativeToken)
	return req
}

// wantCode fails unless err is a Connect error with code whose message
// contains msg.
func wantCode(t testing.TB, err error, code connect.Code, msg string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want Connect %v", err, err, code)
	}
	if ce.Code() != code || !strings.Contains(ce.Message(), msg) {
		t.Fatalf("error %v %q, want %v containing %q", ce.Code(), ce.Message(), code, msg)
	}
}

// run is what a process stream delivered.
type run struct {
	pid            uint32
	stdout, stderr []byte
	pty            []byte
	keepalives     int
	end            *process.ProcessEvent_EndEvent
	err            error
}

// collect reads a process stream to its end; each event goes to onEvent
// first, when given.
func collect[T interface{ GetEvent() *process.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
}, onEvent func(*run, *process.ProcessEvent)) run {
	return collectFrom(s, run{}, true, onEvent)
}

// collectFrom is collect for a stream of which r has been read already;
// checkStart says the next event must be start.
func collectFrom[T interface{ GetEvent() *process.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
}, r run, checkStart bool, onEvent func(*run, *process.ProcessEvent)) run {
	first := checkStart
	for s.Receive() {
		ev := s.Msg().GetEvent()
		if first {
			first = false
			if ev.GetStart() == nil {
				r.err = errors.New("the first event is not start")
				return r
			}
		}
		switch e := ev.GetEvent().(type) {
		case *process.ProcessEvent_Start:
			r.pid = e.Start.GetPid()
		case *process.ProcessEvent_Data:
			r.stdout = append(r.stdout, e.Data.GetStdout()...)
			r.stderr = append(r.stderr, e.Data.GetStderr()...)
			r.pty = append(r.pty, e.Data.GetPty()...)
		case *process.ProcessEvent_Keepalive:
			r.keepalives++
		case *process.ProcessEvent_End:
			r.end = e.End
		}
		if onEvent != nil {
			onEvent(&r, ev)
		}
	}
	r.err = s.Err()
	return r
}

// startReq is a Start request for a shell command, as commands.run sends.
func startReq(cmd string) *connect.Request[process.StartRequest] {
	no := false
	return authed(connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", cmd}},
		Stdin:   &no,
	}))
}

// withStdin is startReq with an open stdin.
func withStdin(req *connect.Request[process.StartRequest]) *connect.Request[process.StartRequest] {
	yes := true
	req.Msg.Stdin = &yes
	return req
}

func byPid(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

func byTag(tag string) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}
}
