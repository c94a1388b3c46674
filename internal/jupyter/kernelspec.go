package jupyter

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/rayito/rayito-agent/internal/wire"
)

// DefaultKernel is the kernelspec started when a request names none.
const DefaultKernel = "python3"

// interruptMessage is the kernelspec interrupt_mode that asks for an
// interrupt_request on the control channel instead of SIGINT.
const interruptMessage = "message"

// validSpecName is Jupyter's rule for kernelspec directory names; it also
// keeps a name from escaping the kernels directory. Compiled at first use,
// not at the agent's start (an idle agent's memory).
var validSpecName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
})

// kernelspec is one kernel.json and the directory it was found in.
type kernelspec struct {
	Name          string            `json:"-"`
	Dir           string            `json:"-"`
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
	Metadata      json.RawMessage   `json:"metadata"`
}

// StandardDataDirs returns the Jupyter data directories in search order:
// $JUPYTER_PATH, the user's data dir, then the system prefixes. Debian's
// python3-ipykernel installs into /usr/share/jupyter.
func StandardDataDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("JUPYTER_PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	switch {
	case os.Getenv("JUPYTER_DATA_DIR") != "":
		dirs = append(dirs, os.Getenv("JUPYTER_DATA_DIR"))
	case os.Getenv("XDG_DATA_HOME") != "":
		dirs = append(dirs, filepath.Join(os.Getenv("XDG_DATA_HOME"), "jupyter"))
	default:
		if home, err := os.UserHomeDir(); err == nil {
			dirs = append(dirs, filepath.Join(home, ".local", "share", "jupyter"))
		}
	}
	return append(dirs, "/usr/local/share/jupyter", "/usr/share/jupyter")
}

// findSpec returns the first kernelspec called name in the data dirs.
// A missing default kernel is unavailable (something must be installed);
// any other unknown name is not_found, with the names that do exist.
func findSpec(dataDirs []string, name string) (*kernelspec, error) {
	if !validSpecName().MatchString(name) {
		return nil, wire.Errorf(wire.CodeBadRequest, "invalid kernelspec name %q", name)
	}
	var kernelDirs []string
	for _, d := range dataDirs {
		kd := filepath.Join(d, "kernels")
		kernelDirs = append(kernelDirs, kd)
		for _, n := range []string{name, strings.ToLower(name)} {
			dir := filepath.Join(kd, n)
			spec, err := readSpec(dir)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			spec.Name = name
			return spec, nil
		}
	}
	where := strings.Join(kernelDirs, ", ")
	if name == DefaultKernel {
		return nil, wire.Errorf(wire.CodeUnavailable,
			"no kernelspec %q in %s: install python3-ipykernel (apt-get install python3-ipykernel)", name, where)
	}
	return nil, wire.Errorf(wire.CodeNotFound, "no kernelspec %q in %s (available: %s)",
		name, where, strings.Join(listSpecs(dataDirs), ", "))
}

func readSpec(dir string) (*kernelspec, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		return nil, err
	}
	spec := &kernelspec{Dir: dir}
	if err := json.Unmarshal(b, spec); err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "kernelspec %s/kernel.json: %v", dir, err)
	}
	if len(spec.Argv) == 0 {
		return nil, wire.Errorf(wire.CodeUnavailable, "kernelspec %s/kernel.json has no argv", dir)
	}
	return spec, nil
}

// listSpecs returns the names of every kernelspec found, sorted.
func listSpecs(dataDirs []string) []string {
	seen := map[string]bool{}
	for _, d := range dataDirs {
		entries, _ := os.ReadDir(filepath.Join(d, "kernels"))
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(d, "kernels", e.Name(), "kernel.json")); err == nil {
				seen[e.Name()] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

// argv returns the kernel's command line for a connection file, with the
// placeholders jupyter_client substitutes.
func (s *kernelspec) argv(connFile string) []string {
	out := make([]string, len(s.Argv))
	for i, a := range s.Argv {
		a = strings.ReplaceAll(a, "{connection_file}", connFile)
		out[i] = strings.ReplaceAll(a, "{resource_dir}", s.Dir)
	}
	return out
}
