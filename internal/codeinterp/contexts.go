package codeinterp

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/wire"
)

// contextModel is E2B's context: a kernel, its language and directory.
type contextModel struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextOf(k *jupyter.Kernel) contextModel {
	return contextModel{ID: k.ID(), Language: strings.ToLower(k.Language()), Cwd: k.Cwd()}
}

// normalizeLanguage names languages as E2B does: lower case, js and ts
// spelled out, python when none is given.
func normalizeLanguage(l string) string {
	switch l = strings.ToLower(strings.TrimSpace(l)); l {
	case "":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return l
}

// specFor finds the kernelspec for a language: python3 for python, else
// the first kernelspec of that language.
func (s *Server) specFor(language string) (string, error) {
	if language == "python" {
		return jupyter.DefaultKernel, nil
	}
	var have []string
	for _, sp := range s.o.Kernels.Specs() {
		if strings.EqualFold(sp.Language, language) {
			return sp.Name, nil
		}
		have = append(have, strings.ToLower(sp.Language))
	}
	sort.Strings(have)
	return "", wire.Errorf(wire.CodeBadRequest, "no kernel for language %q is installed (installed: %s)", language, strings.Join(have, ", "))
}

// defaultContext returns the kernel id of a language's default context:
// "" (the agent's default kernel) for python, else a kernel started on
// first use and again if it was removed.
func (s *Server) defaultContext(ctx context.Context, language string) (string, error) {
	language = normalizeLanguage(language)
	if language == "python" {
		return "", nil
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	s.mu.Lock()
	id := s.defaults[language]
	s.mu.Unlock()
	if id != "" {
		if _, err := s.o.Kernels.Get(id); err == nil {
			return id, nil
		}
	}
	name, err := s.specFor(language)
	if err != nil {
		return "", err
	}
	k, err := s.o.Kernels.Start(ctx, jupyter.StartOptions{Name: name})
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.defaults[language] = k.ID()
	s.mu.Unlock()
	return k.ID(), nil
}

// listContexts lists every kernel of the agent, whichever surface
// started it.
func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	out := []contextModel{}
	for _, info := range s.o.Kernels.List() {
		if k, err := s.o.Kernels.Get(info.Kernel); err == nil {
			out = append(out, contextOf(k))
		}
	}
	writeJSON(w, out)
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	name, err := s.specFor(normalizeLanguage(req.Language))
	if err != nil {
		writeErr(w, err)
		return
	}
	// The kernel manager bounds starts and restarts (--kernel-start-timeout).
	ctx := r.Context()
	k, err := s.o.Kernels.Start(ctx, jupyter.StartOptions{Name: name, Cwd: req.Cwd})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, contextOf(k))
}

// contextKernel finds the path's context, or answers 404.
func (s *Server) contextKernel(w http.ResponseWriter, r *http.Request) (*jupyter.Kernel, bool) {
	k, err := s.o.Kernels.Get(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Context "+r.PathValue("id")+" not found")
		return nil, false
	}
	return k, true
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	k, ok := s.contextKernel(w, r)
	if !ok {
		return
	}
	// The manager runs the restart to its end if the client goes away.
	if err := s.o.Kernels.Restart(r.Context(), k.ID()); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) removeContext(w http.ResponseWriter, r *http.Request) {
	k, ok := s.contextKernel(w, r)
	if !ok {
		return
	}
	if err := s.o.Kernels.Shutdown(r.Context(), k.ID()); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(v)
}
