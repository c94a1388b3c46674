package jupyterapi

import (
	"crypto/rand"
	"net/http"
	"net/url"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/jupyter"
)

// session is jupyter_server's link from a notebook (or console, or file)
// to the kernel it runs on.
type session struct {
	ID, Path, Name, Type, Kernel string
}

// sessionTable holds the sessions in the order they were created.
type sessionTable struct {
	create sync.Mutex // one creation at a time, so one path gets one session
	mu     sync.Mutex
	list   []*session
}

func (t *sessionTable) add(ss *session) {
	t.mu.Lock()
	t.list = append(t.list, ss)
	t.mu.Unlock()
}

func (t *sessionTable) remove(id string) {
	t.mu.Lock()
	t.list = slices.DeleteFunc(t.list, func(ss *session) bool { return ss.ID == id })
	t.mu.Unlock()
}

// find returns a copy of the session that matches.
func (t *sessionTable) find(match func(*session) bool) (session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ss := range t.list {
		if match(ss) {
			return *ss, true
		}
	}
	return session{}, false
}

func (t *sessionTable) all() []session {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]session, len(t.list))
	for i, ss := range t.list {
		out[i] = *ss
	}
	return out
}

// update applies fn to the session with the id, if it still exists.
func (t *sessionTable) update(id string, fn func(*session)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ss := range t.list {
		if ss.ID == id {
			fn(ss)
			return true
		}
	}
	return false
}

// sessionModel is jupyter_server's session model; notebook is the legacy
// form older clients read.
type sessionModel struct {
	ID       string      `json:"id"`
	Path     string      `json:"path"`
	Name     string      `json:"name"`
	Type     string      `json:"type"`
	Kernel   kernelModel `json:"kernel"`
	Notebook struct {
		Path string `json:"path"`
		Name string `json:"name"`
	} `json:"notebook"`
}

// model describes a session. A session whose kernel is gone (shut down
// through any surface) is dropped, as jupyter_server drops it.
func (s *Server) model(ss session) (sessionModel, bool) {
	k, err := s.o.Kernels.Get(ss.Kernel)
	if err != nil {
		s.sessions.remove(ss.ID)
		return sessionModel{}, false
	}
	m := sessionModel{ID: ss.ID, Path: ss.Path, Name: ss.Name, Type: ss.Type, Kernel: s.modelOf(k)}
	m.Notebook.Path, m.Notebook.Name = ss.Path, ss.Name
	return m, true
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	out := []sessionModel{}
	for _, ss := range s.sessions.all() {
		if m, ok := s.model(ss); ok {
			out = append(out, m)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionRequest is the body of POST and PATCH.
type sessionRequest struct {
	Path   *string `json:"path"`
	Name   *string `json:"name"`
	Type   *string `json:"type"`
	Kernel *struct {
		ID   *string `json:"id"`
		Name *string `json:"name"`
	} `json:"kernel"`
	Notebook *struct {
		Path *string `json:"path"`
	} `json:"notebook"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req sessionRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Path == nil && req.Notebook != nil && req.Notebook.Path != nil {
		notebook := "notebook"
		req.Path, req.Type = req.Notebook.Path, &notebook
	}
	switch {
	case req.Path == nil:
		writeError(w, http.StatusBadRequest, "Missing field in JSON data: path")
		return
	case req.Type == nil:
		writeError(w, http.StatusBadRequest, "Missing field in JSON data: type")
		return
	}
	s.sessions.create.Lock()
	defer s.sessions.create.Unlock()
	// One path has one session: asking again returns it.
	if ss, ok := s.sessions.find(func(ss *session) bool { return ss.Path == *req.Path }); ok {
		if m, ok := s.model(ss); ok {
			writeJSON(w, http.StatusCreated, m)
			return
		}
	}
	ss := &session{ID: rand.Text(), Path: *req.Path, Type: *req.Type}
	if req.Name != nil {
		ss.Name = *req.Name
	}
	var kernelID, kernelName string
	if req.Kernel != nil {
		kernelID, kernelName = deref(req.Kernel.ID), deref(req.Kernel.Name)
	}
	// Like jupyter_server, a kernel id that does not exist starts a new
	// kernel rather than failing.
	k, err := s.o.Kernels.Get(kernelID)
	if kernelID == "" || err != nil {
		if k, err = s.startFor(r, kernelName); err != nil {
			writeErr(w, err)
			return
		}
	}
	// Sessions keep the manager's id; clients see the kernel's UUID.
	ss.Kernel = k.ID()
	s.sessions.add(ss)
	m, ok := s.model(*ss)
	if !ok {
		writeError(w, http.StatusConflict, "the session's kernel was shut down while the session was created")
		return
	}
	w.Header().Set("Location", "/api/sessions/"+url.PathEscape(ss.ID))
	writeJSON(w, http.StatusCreated, m)
}

func (s *Server) startFor(r *http.Request, name string) (*jupyter.Kernel, error) {
	// The kernel manager bounds starts and restarts (--kernel-start-timeout).
	ctx := r.Context()
	return s.o.Kernels.Start(ctx, jupyter.StartOptions{Name: name})
}

// session finds the path's session, or answers 404.
func (s *Server) session(w http.ResponseWriter, r *http.Request) (session, bool) {
	id := r.PathValue("id")
	if ss, ok := s.sessions.find(func(ss *session) bool { return ss.ID == id }); ok {
		return ss, true
	}
	writeError(w, http.StatusNotFound, "Session not found: "+id)
	return session{}, false
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	ss, ok := s.session(w, r)
	if !ok {
		return
	}
	m, ok := s.model(ss)
	if !ok {
		writeError(w, http.StatusNotFound, "Session not found: "+ss.ID+" (its kernel was shut down)")
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// updateSession renames or moves a session, or gives it another kernel:
// an existing one by id, or a new one by name; the kernel it had before
// is then shut down, as jupyter_server does.
func (s *Server) updateSession(w http.ResponseWriter, r *http.Request) {
	ss, ok := s.session(w, r)
	if !ok {
		return
	}
	var req sessionRequest
	if !readJSON(w, r, &req) {
		return
	}
	kernelID := ss.Kernel
	if req.Kernel != nil {
		switch {
		case req.Kernel.ID != nil:
			k, err := s.o.Kernels.Get(*req.Kernel.ID)
			if err != nil {
				writeError(w, http.StatusBadRequest, "No such kernel: "+*req.Kernel.ID)
				return
			}
			kernelID = k.ID()
		case req.Kernel.Name != nil:
			k, err := s.startFor(r, *req.Kernel.Name)
			if err != nil {
				writeErr(w, err)
				return
			}
			kernelID = k.ID()
		}
	}
	before := ss.Kernel
	found := s.sessions.update(ss.ID, func(cur *session) {
		if req.Path != nil {
			cur.Path = *req.Path
		}
		if req.Name != nil {
			cur.Name = *req.Name
		}
		if req.Type != nil {
			cur.Type = *req.Type
		}
		cur.Kernel = kernelID
		ss = *cur
	})
	if !found {
		writeError(w, http.StatusNotFound, "Session not found: "+ss.ID)
		return
	}
	if before != kernelID {
		if err := s.o.Kernels.Shutdown(r.Context(), before); err != nil {
			s.log.Debug("the session's previous kernel was already gone", zap.Error(err))
		}
	}
	m, ok := s.model(ss)
	if !ok {
		writeError(w, http.StatusNotFound, "Session not found: "+ss.ID+" (its kernel was shut down)")
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// deleteSession ends the session and shuts its kernel down.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	ss, ok := s.session(w, r)
	if !ok {
		return
	}
	s.sessions.remove(ss.ID)
	if err := s.o.Kernels.Shutdown(r.Context(), ss.Kernel); err != nil {
		s.log.Debug("the deleted session's kernel was already gone", zap.Error(err))
	}
	w.WriteHeader(http.StatusNoContent)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
