package jupyterapi

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/rayito/rayito-agent/internal/jupyter"
)

// kernelModel is jupyter_server's kernel model.
type kernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
}

// modelOf is k's model. Its connections are the open relays but the
// parked ones: as in jupyter_server, a client whose websocket closed is
// no longer connected, though its requests' replies are kept for it.
func (s *Server) modelOf(k *jupyter.Kernel) kernelModel {
	info := k.Info()
	return kernelModel{
		ID: info.UUID, Name: info.Name, LastActivity: isoTime(k.LastActivity()),
		ExecutionState: executionState(info.State), Connections: max(0, k.Connections()-s.parkedOf(k.ID())),
	}
}

// executionState maps the manager's states onto Jupyter's. A lost kernel
// (it failed the resume check) is unknown: it may answer again, or need
// a restart.
func executionState(s jupyter.State) string {
	switch s {
	case jupyter.StateStarting, jupyter.StateIdle, jupyter.StateBusy, jupyter.StateDead:
		return string(s)
	}
	return "unknown"
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func (s *Server) listKernels(w http.ResponseWriter, r *http.Request) {
	out := []kernelModel{}
	for _, info := range s.o.Kernels.List() {
		if k, err := s.o.Kernels.Get(info.Kernel); err == nil {
			out = append(out, s.modelOf(k))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) startKernel(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	// The kernel manager bounds starts and restarts (--kernel-start-timeout).
	ctx := r.Context()
	k, err := s.o.Kernels.Start(ctx, jupyter.StartOptions{Name: req.Name})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", "/api/kernels/"+url.PathEscape(k.UUID()))
	writeJSON(w, http.StatusCreated, s.modelOf(k))
}

// kernel finds the path's kernel, or answers 404.
func (s *Server) kernel(w http.ResponseWriter, r *http.Request) (*jupyter.Kernel, bool) {
	k, err := s.o.Kernels.Get(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Kernel does not exist: "+r.PathValue("id"))
		return nil, false
	}
	return k, true
}

func (s *Server) getKernel(w http.ResponseWriter, r *http.Request) {
	if k, ok := s.kernel(w, r); ok {
		writeJSON(w, http.StatusOK, s.modelOf(k))
	}
}

func (s *Server) shutdownKernel(w http.ResponseWriter, r *http.Request) {
	k, ok := s.kernel(w, r)
	if !ok {
		return
	}
	if err := s.o.Kernels.Shutdown(r.Context(), k.ID()); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) interruptKernel(w http.ResponseWriter, r *http.Request) {
	k, ok := s.kernel(w, r)
	if !ok {
		return
	}
	if err := s.o.Kernels.Interrupt(k.ID()); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restartKernel(w http.ResponseWriter, r *http.Request) {
	k, ok := s.kernel(w, r)
	if !ok {
		return
	}
	// The manager runs the restart to its end if the client goes away.
	if err := s.o.Kernels.Restart(r.Context(), k.ID()); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.modelOf(k))
}

// specModel is jupyter_server's kernelspec model.
type specModel struct {
	Name      string            `json:"name"`
	Spec      specBody          `json:"spec"`
	Resources map[string]string `json:"resources"`
}

type specBody struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
	Metadata      any               `json:"metadata"`
}

func specModelOf(sp jupyter.Spec) specModel {
	m := specModel{
		Name: sp.Name,
		Spec: specBody{
			Argv: sp.Argv, DisplayName: sp.DisplayName, Language: sp.Language,
			InterruptMode: sp.InterruptMode, Env: sp.Env, Metadata: sp.Metadata,
		},
		Resources: map[string]string{},
	}
	if m.Spec.Argv == nil {
		m.Spec.Argv = []string{}
	}
	// jupyter_server lists kernel.js, kernel.css and the logos, these by
	// their name without extension.
	for _, res := range sp.Resources {
		key := res
		if strings.HasPrefix(res, "logo-") {
			key = strings.TrimSuffix(res, path.Ext(res))
		} else if res != "kernel.js" && res != "kernel.css" {
			continue
		}
		m.Resources[key] = "/kernelspecs/" + url.PathEscape(sp.Name) + "/" + url.PathEscape(res)
	}
	return m
}

func (s *Server) listSpecs(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Default     string               `json:"default"`
		KernelSpecs map[string]specModel `json:"kernelspecs"`
	}{Default: jupyter.DefaultKernel, KernelSpecs: map[string]specModel{}}
	for _, sp := range s.o.Kernels.Specs() {
		out.KernelSpecs[sp.Name] = specModelOf(sp)
	}
	writeJSON(w, http.StatusOK, out)
}

// spec finds the path's kernelspec, or answers 404.
func (s *Server) spec(w http.ResponseWriter, r *http.Request) (jupyter.Spec, bool) {
	name := r.PathValue("name")
	for _, sp := range s.o.Kernels.Specs() {
		if sp.Name == name {
			return sp, true
		}
	}
	writeError(w, http.StatusNotFound, "Kernel spec "+name+" not found")
	return jupyter.Spec{}, false
}

func (s *Server) getSpec(w http.ResponseWriter, r *http.Request) {
	if sp, ok := s.spec(w, r); ok {
		writeJSON(w, http.StatusOK, specModelOf(sp))
	}
}

// getSpecResource serves a kernelspec's logo and other files beside its
// kernel.json, and nothing else.
func (s *Server) getSpecResource(w http.ResponseWriter, r *http.Request) {
	sp, ok := s.spec(w, r)
	if !ok {
		return
	}
	p := sp.ResourcePath(r.PathValue("file"))
	if p == "" {
		writeError(w, http.StatusNotFound, "kernelspec "+sp.Name+" has no resource "+r.PathValue("file"))
		return
	}
	http.ServeFile(w, r, p)
}
