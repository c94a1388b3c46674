package envdapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/surface"
	"github.com/rayito/rayito-agent/internal/wire"
)

// ControlPlane answers the few calls of E2B's sandbox API that the e2b
// SDK makes around a sandbox (create, connect, set a timeout, get its
// info, kill), for the one sandbox this agent is: a local path for E2B
// users, whose SDK needs a control plane before it talks to envd. An
// unchanged program with E2B_API_URL and E2B_SANDBOX_URL pointing at the
// agent and E2B_API_KEY set to its token runs Sandbox.create() and all
// that follows against it. Behind --e2b-api, which make run turns on;
// off in images, where the platform answers these calls.
//
// Create and connect hand back the agent's own token (so the SDK sends
// it to envd's routes and the code interpreter's) and apply the envs
// given to Sandbox.create as /v1/init's env does. Timeouts are accepted
// and change nothing, kill ends nothing: the local agent runs on.
type ControlPlane struct {
	auth *surface.Auth
	// setEnv adds variables to every later process's environment.
	setEnv func(map[string]string)
	// id is the sandbox's id, as the SDK shows it.
	id      string
	started time.Time
}

// EnvdVersion is the envd version the control plane reports: the SDK
// turns features on by it, and the agent serves those of this version.
const EnvdVersion = "0.6.13"

// APIKeys is where the SDK sends its API key.
var APIKeys = surface.FromHeader("X-API-KEY")

// NewControlPlane builds the control plane; setEnv applies the envs of a
// create.
func NewControlPlane(auth *surface.Auth, id string, setEnv func(map[string]string)) *ControlPlane {
	if id == "" {
		id = "local"
	}
	return &ControlPlane{auth: auth, setEnv: setEnv, id: id, started: time.Now()}
}

// Surface is the control plane's routes, with the agent's token as the
// API key.
func (c *ControlPlane) Surface() surface.Surface {
	return surface.Surface{
		Name:   "e2b-api",
		Tokens: APIKeys,
		Refuse: func(w http.ResponseWriter, r *http.Request, err error) {
			msg := "the API key must be the agent's access token (X-API-KEY; E2B_API_KEY for the SDK)"
			if errors.Is(err, surface.ErrNoTokenSet) {
				msg = "the agent has no access token yet, so its E2B API refuses every key"
			}
			apiError(w, http.StatusUnauthorized, msg)
		},
		Routes: []surface.Route{
			{Pattern: "POST /v2/sandboxes", Handler: http.HandlerFunc(c.create)},
			{Pattern: "POST /v2/sandboxes/{id}/connect", Handler: c.known(c.connect)},
			{Pattern: "GET /sandboxes/{id}", Handler: c.known(c.info)},
			{Pattern: "POST /sandboxes/{id}/timeout", Handler: c.known(noContent)},
			{Pattern: "DELETE /sandboxes/{id}", Handler: c.known(noContent)},
		},
	}
}

// sandbox is what create and connect answer.
type sandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

func (c *ControlPlane) sandbox(template string) sandbox {
	var token string
	c.auth.WithToken(func(t string) bool { token = t; return true })
	if template == "" {
		template = "base"
	}
	return sandbox{SandboxID: c.id, TemplateID: template, ClientID: "rayito", EnvdVersion: EnvdVersion,
		EnvdAccessToken: token, TrafficAccessToken: token}
}

func (c *ControlPlane) create(w http.ResponseWriter, r *http.Request) {
	// E2B's NewSandbox: the fields the SDK sends. Those this agent has no
	// use for are accepted as they are; any other is refused.
	var body struct {
		TemplateID          string            `json:"templateID"`
		EnvVars             map[string]string `json:"envVars"`
		Metadata            map[string]string `json:"metadata"`
		Timeout             *int64            `json:"timeout"`
		Secure              json.RawMessage   `json:"secure"`
		MCP                 json.RawMessage   `json:"mcp"`
		AllowInternetAccess json.RawMessage   `json:"allow_internet_access"`
		Network             json.RawMessage   `json:"network"`
		IAM                 json.RawMessage   `json:"iam"`
		AutoPause           json.RawMessage   `json:"autoPause"`
		AutoPauseMemory     json.RawMessage   `json:"autoPauseMemory"`
		AutoResume          json.RawMessage   `json:"autoResume"`
		VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if len(bytes.TrimSpace(b)) == 0 {
		apiError(w, http.StatusBadRequest, "the body must be a JSON object (NewSandbox)")
		return
	}
	if e := surface.DecodeObject(b, &body); e != nil {
		apiError(w, http.StatusBadRequest, e.Message)
		return
	}
	if err := proc.CheckDefaultEnv(body.EnvVars); err != nil {
		apiError(w, http.StatusBadRequest, "envVars: "+wire.AsError(err).Message)
		return
	}
	if len(body.EnvVars) > 0 {
		c.setEnv(body.EnvVars)
	}
	writeAPI(w, http.StatusCreated, c.sandbox(body.TemplateID))
}

func (c *ControlPlane) connect(w http.ResponseWriter, r *http.Request) {
	writeAPI(w, http.StatusCreated, c.sandbox(""))
}

func (c *ControlPlane) info(w http.ResponseWriter, r *http.Request) {
	s := c.sandbox("")
	writeAPI(w, http.StatusOK, map[string]any{
		"sandboxID": s.SandboxID, "templateID": s.TemplateID, "clientID": s.ClientID, "envdVersion": s.EnvdVersion,
		"state": "running", "startedAt": c.started.UTC().Format(time.RFC3339), "endAt": c.started.Add(100 * 365 * 24 * time.Hour).UTC().Format(time.RFC3339),
		"cpuCount": 0, "memoryMB": 0, "metadata": map[string]string{},
	})
}

// known answers 404, as E2B's API does, for a sandbox id that is not
// this agent's.
func (c *ControlPlane) known(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("id"); id != c.id {
			apiError(w, http.StatusNotFound, "sandbox "+id+" not found: this agent is sandbox "+c.id)
			return
		}
		h(w, r)
	})
}

func noContent(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }

// apiError answers in E2B's API error shape.
func apiError(w http.ResponseWriter, status int, msg string) {
	writeAPI(w, status, map[string]any{"code": status, "message": msg})
}

func writeAPI(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
