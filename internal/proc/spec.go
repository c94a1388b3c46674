package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

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
	mu   sync.RWMutex
	user string
	cwd  string
	env  map[string]string
	// envs caches, per user, the environment of requests that bring none
	// of their own: every exec would otherwise rebuild and sort it.
	// version tells a cache filled before a Set from one filled after.
	envs    map[string][]string
	version uint64
}

// Set replaces the defaults; empty values leave a field unchanged, and env
// entries are merged.
func (d *Defaults) Set(userName, cwd string, env map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if userName != "" {
		d.user = userName
	}
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
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.user, d.cwd, d.env, d.version
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
	u, err := lookupUser(spec.User, defUser)
	if err != nil {
		return r, err
	}
	r.User, r.Home = u.Username, u.HomeDir
	if u.Uid != strconv.Itoa(os.Getuid()) {
		cred, err := Credential(u)
		if err != nil {
			return r, err
		}
		r.Cred = cred
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
		r.Dir = u.HomeDir
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
	u, err := lookupUser(name, defUser)
	if err != nil {
		return "", "", err
	}
	return u.Username, u.HomeDir, nil
}

// lookupUser finds the user by name or uid, falling back to def and then
// to the agent's own user. A user that does not exist is bad_request.
func lookupUser(name, def string) (*user.User, error) {
	if name == "" {
		name = def
	}
	u, err := LookupUser(name)
	if errors.Is(err, ErrUnknownUser) {
		return nil, wire.Errorf(wire.CodeBadRequest, "user %q does not exist", name)
	} else if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "%v", err)
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
func (d *Defaults) environment(u *user.User, defEnv, reqEnv map[string]string, version uint64) ([]string, error) {
	if len(reqEnv) == 0 {
		if env := d.cachedEnv(u.Username, version); env != nil {
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
	env["HOME"], env["USER"], env["LOGNAME"] = u.HomeDir, u.Username, u.Username
	for k, v := range defEnv {
		env[k] = v
	}
	for k, v := range reqEnv {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, wire.Errorf(wire.CodeBadRequest, "invalid environment variable %q", k)
		}
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	if len(reqEnv) == 0 {
		d.storeEnv(u.Username, version, out)
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

// ErrUnknownUser is returned by LookupUser for a name no account has.
var ErrUnknownUser = errors.New("no such user")

// UserName is the user a request runs as: name, or the default user when
// name is empty ("" when there is none either: the agent's own user).
func (d *Defaults) UserName(name string) string {
	if name != "" {
		return name
	}
	defUser, _, _, _ := d.get()
	return defUser
}

// LookupUser finds an account by name, or by uid when name is a number
// that no account is named; "" is the agent's own user. What it finds is
// kept while /etc/passwd is unchanged (accounts.go).
func LookupUser(name string) (*user.User, error) {
	if name == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("cannot look up the agent's own user: %w", err)
		}
		return u, nil
	}
	u, err := cachedUser(name)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", name, ErrUnknownUser)
	}
	return u, nil
}

// Credential is the uid, gid and supplementary groups of an account,
// kept while /etc/group is unchanged (accounts.go).
func Credential(u *user.User) (*syscall.Credential, error) {
	return cachedCredential(u)
}

func credentialUncached(u *user.User) (*syscall.Credential, error) {
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, wire.Errorf(wire.CodeInternal, "user %q has non-numeric ids", u.Username)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, nil
}

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
