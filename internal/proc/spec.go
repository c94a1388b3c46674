package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/rayito/rayito-agent/internal/users"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Spec is what a client asks to run, before defaults are applied.
type Spec struct {
	Argv []string
	Env  map[string]string
	Cwd  string
	User string
}

// Resolved is a Spec checked against the system: the program exists, the
// user exists, the directory exists, and the environment is complete.
type Resolved struct {
	Path string
	Argv []string
	Env  []string
	Dir  string
	Cred *syscall.Credential // nil: run as the agent's own user
	Home string
	User string
}

// Defaults are what processes get when a request does not say: set from
// flags at start and by the host's /v1/init later. Safe for concurrent use.
type Defaults struct {
	// Accounts resolves users; nil: a cache of the Defaults' own.
	Accounts *users.Accounts
	once     sync.Once

	mu  sync.RWMutex
	cwd string
	env map[string]string
	// envs caches, per user, the environment of requests that bring none
	// of their own: every exec would otherwise rebuild and sort it.
	// version tells a cache filled before a Set from one filled after.
	envs    map[string][]string
	version uint64
}

// Set replaces the defaults; empty values leave a field unchanged, and env
// entries are merged. The default user is the accounts' (users.Accounts),
// which every manager asks.
func (d *Defaults) Set(userName, cwd string, env map[string]string) {
	accounts := d.Users()
	d.mu.Lock()
	defer d.mu.Unlock()
	accounts.SetDefault(userName)
	if cwd != "" {
		d.cwd = cwd
	}
	if len(env) > 0 {
		// A new map: Resolve reads the old one without the lock.
		merged := make(map[string]string, len(d.env)+len(env))
		for k, v := range d.env {
			merged[k] = v
		}
		for k, v := range env {
			merged[k] = v
		}
		d.env = merged
	}
	d.envs = nil
	d.version++
}

func (d *Defaults) get() (string, string, map[string]string, uint64) {
	def := d.Users().Named("")
	d.mu.RLock()
	defer d.mu.RUnlock()
	return def, d.cwd, d.env, d.version
}

// cachedEnv returns the environment of a request without env for user, or
// nil if it was not built since the defaults last changed.
func (d *Defaults) cachedEnv(user string, version uint64) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.version != version {
		return nil
	}
	return d.envs[user]
}

func (d *Defaults) storeEnv(user string, version uint64, env []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.version != version {
		return
	}
	if d.envs == nil {
		d.envs = make(map[string][]string)
	}
	d.envs[user] = env
}

// secretEnv are the agent's own variables that must not leak into the
// processes it runs (the access token above all).
var secretEnv = []string{"RAYITO_"}

// Resolve applies the defaults to spec and checks it. Problems a client can
// fix (no such user, directory or program) are *wire.Error bad_request.
func (d *Defaults) Resolve(spec Spec) (Resolved, error) {
	var r Resolved
	defUser, defCwd, defEnv, version := d.get()
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return r, wire.Errorf(wire.CodeBadRequest, "argv must name a program")
	}
	// A C string ends at its first NUL: the kernel could not be given
	// such an argument, and execve's EINVAL would not say which.
	for i, a := range spec.Argv {
		if strings.Contains(a, "\x00") {
			return r, wire.Errorf(wire.CodeBadRequest, "argv[%d] contains a NUL byte", i)
		}
	}
	if strings.Contains(spec.Cwd, "\x00") {
		return r, wire.Errorf(wire.CodeBadRequest, "cwd contains a NUL byte")
	}
	u, err := d.lookup(spec.User, defUser)
	if err != nil {
		return r, err
	}
	r.User, r.Home = u.Name, u.Home
	if !u.IsAgent() {
		r.Cred = u.Credential()
	}

	env, err := d.environment(u, defEnv, spec.Env, version)
	if err != nil {
		return r, err
	}
	r.Env = env

	r.Dir = spec.Cwd
	if r.Dir == "" {
		r.Dir = defCwd
	}
	if r.Dir == "" {
		r.Dir = u.Home
		if st, err := os.Stat(r.Dir); err != nil || !st.IsDir() {
			r.Dir = "/"
		}
	} else if st, err := os.Stat(r.Dir); err != nil {
		return r, wire.Errorf(wire.CodeBadRequest, "cwd %q: %v", r.Dir, unwrapPathErr(err))
	} else if !st.IsDir() {
		return r, wire.Errorf(wire.CodeBadRequest, "cwd %q is not a directory", r.Dir)
	}

	r.Argv = spec.Argv
	r.Path, err = lookPath(spec.Argv[0], pathOf(env), r.Dir)
	if err != nil {
		return r, wire.Errorf(wire.CodeBadRequest, "%s: %v", spec.Argv[0], err)
	}
	return r, nil
}

// User returns who a request naming name runs as: that user, else the
// default user, else the agent's own; with their home directory, against
// which other surfaces resolve relative paths.
func (d *Defaults) User(name string) (userName, home string, err error) {
	defUser, _, _, _ := d.get()
	u, err := d.lookup(name, defUser)
	if err != nil {
		return "", "", err
	}
	return u.Name, u.Home, nil
}

// Users are the accounts the defaults resolve users with.
func (d *Defaults) Users() *users.Accounts {
	d.once.Do(func() {
		if d.Accounts == nil {
			d.Accounts = users.New()
		}
	})
	return d.Accounts
}

// lookup finds the user by name or uid, falling back to def and then to
// the agent's own user. A user that does not exist is bad_request.
func (d *Defaults) lookup(name, def string) (users.Account, error) {
	if name == "" {
		name = def
	}
	u, err := d.Users().Lookup(name)
	if errors.Is(err, users.ErrUnknown) {
		return u, wire.Errorf(wire.CodeBadRequest, "user %q does not exist", name)
	} else if err != nil {
		return u, wire.Errorf(wire.CodeInternal, "%v", err)
	}
	return u, nil
}

// pathOf is the PATH of an environment.
func pathOf(env []string) string {
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			return p
		}
	}
	return ""
}

// environment is what a process of user u gets: the agent's environment
// without its secrets, the user's HOME, USER and LOGNAME, the defaults'
// env, then the request's own.
func (d *Defaults) environment(u users.Account, defEnv, reqEnv map[string]string, version uint64) ([]string, error) {
	if len(reqEnv) == 0 {
		if env := d.cachedEnv(u.Name, version); env != nil {
			return env, nil
		}
	}
	env := map[string]string{}
	for _, kv := range cleanEnviron() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["PATH"] == "" {
		env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env["HOME"], env["USER"], env["LOGNAME"] = u.Home, u.Name, u.Name
	for k, v := range defEnv {
		env[k] = v
	}
	if err := CheckEnv(reqEnv); err != nil {
		return nil, err
	}
	for k, v := range reqEnv {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	if len(reqEnv) == 0 {
		d.storeEnv(u.Name, version, out)
	}
	return out, nil
}

// Attr builds the ProcAttr for a new session leader with the given files.
func (r Resolved) Attr(files []uintptr) *syscall.ProcAttr {
	return &syscall.ProcAttr{
		Dir:   r.Dir,
		Env:   r.Env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, Credential: r.Cred},
	}
}

// UserName is the user a request runs as: name, or the default user when
// name is empty ("" when there is none either: the agent's own user).
func (d *Defaults) UserName(name string) string { return d.Users().Named(name) }

// lookPath finds a program the way a shell would, using the PATH the
// process will get rather than the agent's own.
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		if !filepath.IsAbs(file) {
			file = filepath.Join(dir, file)
		}
		if err := executable(file); err != nil {
			return "", err
		}
		return file, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return unwrapPathErr(err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// cleanEnviron is the agent's environment without its own secrets.
func cleanEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !hasAnyPrefix(kv, secretEnv) {
			out = append(out, kv)
		}
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
