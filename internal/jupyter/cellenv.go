package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// cellEnvWait bounds each of the silent requests that set and restore a
// cell's environment: they run no user code, so a kernel that does not
// answer within it is stuck.
const cellEnvWait = 10 * time.Second

// savedEnvAttr is where the kernel keeps the values a cell's environment
// replaced: an attribute of the os module, so the user's namespace and
// history see nothing.
const savedEnvAttr = "_rayito_saved_env"

func (s *kernelspec) isPython() bool { return strings.EqualFold(s.Language, "python") }

// setCellEnv sets env in the kernel's os.environ with a silent request,
// which neither counts as an execution nor shows up in the history.
// encoding/json writes a string map as a valid Python dict literal.
func (k *Kernel) setCellEnv(inst *instance, env map[string]string) error {
	lit, err := json.Marshal(env)
	if err != nil {
		return err
	}
	code := fmt.Sprintf("(lambda o, e: (setattr(o, %q, {n: o.environ.get(n) for n in e}), o.environ.update(e)))(__import__('os'), %s)", savedEnvAttr, lit)
	return k.silent(inst, code)
}

// restoreCellEnv puts back what setCellEnv replaced. A failure is only
// logged: the cell already ran.
func (k *Kernel) restoreCellEnv(inst *instance) {
	code := fmt.Sprintf("(lambda o: [o.environ.pop(n, None) if v is None else o.environ.__setitem__(n, v) for n, v in o.__dict__.pop(%q, {}).items()])(__import__('os'))", savedEnvAttr)
	if err := k.silent(inst, code); err != nil {
		k.log.Warn("could not restore the environment after a cell", zap.Error(err))
	}
}

func (k *Kernel) silent(inst *instance, code string) error {
	ctx, cancel := context.WithTimeout(inst.ctx, cellEnvWait)
	defer cancel()
	reply, err := inst.conn.request(ctx, chShell, "execute_request", map[string]any{
		"code": code, "silent": true, "store_history": false, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return err
	}
	body, err := reply.content()
	if err != nil {
		return err
	}
	if body.Status != StatusOK {
		return fmt.Errorf("the kernel answered %s: %s: %s", body.Status, body.EName, body.EValue)
	}
	return nil
}
