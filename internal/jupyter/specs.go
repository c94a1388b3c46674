package jupyter

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
)

// Spec describes an installed kernelspec, for surfaces that list them
// (jupyter_server's /api/kernelspecs, the code interpreter's languages).
type Spec struct {
	Name          string
	Dir           string // the kernelspec's directory: kernel.json and its resources
	Argv          []string
	DisplayName   string
	Language      string
	InterruptMode string // "signal" or "message"
	Env           map[string]string
	Metadata      json.RawMessage // a JSON object
	// Resources are the files beside kernel.json (logos, kernel.js),
	// by name.
	Resources []string
}

// Specs returns every kernelspec found, sorted by name. A name found in
// several data dirs is the first one, as Start would use; kernelspecs
// that cannot be read are left out.
func (m *Manager) Specs() []Spec {
	var out []Spec
	for _, name := range listSpecs(m.dirs) {
		ks, err := findSpec(m.dirs, name)
		if err != nil {
			continue
		}
		out = append(out, ks.export())
	}
	return out
}

func (s *kernelspec) export() Spec {
	mode := s.InterruptMode
	if mode == "" {
		mode = "signal"
	}
	meta := s.Metadata
	if len(meta) == 0 || meta[0] != '{' {
		meta = json.RawMessage("{}")
	}
	out := Spec{
		Name: s.Name, Dir: s.Dir, Argv: append([]string(nil), s.Argv...), DisplayName: s.DisplayName,
		Language: s.Language, InterruptMode: mode, Env: maps.Clone(s.Env), Metadata: meta,
	}
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	if out.DisplayName == "" {
		out.DisplayName = s.Name
	}
	entries, _ := os.ReadDir(s.Dir)
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "kernel.json" {
			out.Resources = append(out.Resources, e.Name())
		}
	}
	return out
}

// ResourcePath returns the path of one of the spec's resource files, or
// "" if it has none of that name.
func (s Spec) ResourcePath(name string) string {
	for _, r := range s.Resources {
		if r == name {
			return filepath.Join(s.Dir, r)
		}
	}
	return ""
}
