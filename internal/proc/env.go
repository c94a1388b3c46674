package proc

import (
	"strings"

	"github.com/rayito/rayito-agent/internal/wire"
)

// ReservedEnvPrefix names the agent's own configuration (RAYITO_URL,
// RAYITO_ACCESS_TOKEN, ...): a host's defaults for every process may not
// set them, since the agent's commands (rayito-agent exec in a sandbox)
// read them and would then talk to, and authenticate as, whatever the
// host's default says.
const ReservedEnvPrefix = "RAYITO_"

// CheckEnv says what is wrong with env for a process, or nil: a name must
// be non-empty and hold no '=' or NUL (execve would split or cut it), a
// value no NUL.
func CheckEnv(env map[string]string) error {
	for k, v := range env {
		switch {
		case k == "":
			return wire.Errorf(wire.CodeBadRequest, "an environment variable has an empty name")
		case strings.ContainsAny(k, "=\x00"):
			return wire.Errorf(wire.CodeBadRequest, "invalid environment variable name %q: no '=' or NUL", k)
		case strings.Contains(v, "\x00"):
			return wire.Errorf(wire.CodeBadRequest, "environment variable %s: its value holds a NUL byte", k)
		}
	}
	return nil
}

// CheckDefaultEnv is CheckEnv for the defaults a host sets for every
// later process (/v1/init's env, a control plane's envVars): the agent's
// own names are refused too.
func CheckDefaultEnv(env map[string]string) error {
	if err := CheckEnv(env); err != nil {
		return err
	}
	for k := range env {
		if strings.HasPrefix(k, ReservedEnvPrefix) {
			return wire.Errorf(wire.CodeBadRequest, "environment variable %s: names that start with %s are the agent's own configuration", k, ReservedEnvPrefix)
		}
	}
	return nil
}
