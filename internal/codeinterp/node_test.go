package codeinterp_test

import (
	"context"
	"testing"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/nodetest"
)

// TestE2BCodeInterpreter drives the API with the real @e2b/code-interpreter
// SDK (nodetest/codeinterp_test.js), then reads what it left through the
// native protocol: the default python context is the agent's default
// kernel.
func TestE2BCodeInterpreter(t *testing.T) {
	nodetest.Require(t, "nodetest", "@e2b/code-interpreter")
	a := newAgent(t)
	env := []string{"RAYITO_URL=" + a.url, "RAYITO_TOKEN=" + testToken, "RAYITO_CWD=" + t.TempDir()}
	for _, c := range []string{"state", "streams", "errors", "rich", "env", "contexts", "abandoned"} {
		t.Run(c, func(t *testing.T) {
			nodetest.Run(t, reaper, "nodetest", "codeinterp_test.js", env, c)
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := client.Dial(ctx, "ws"+a.url[len("http"):], client.Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ex, err := c.DefaultKernel().Execute(ctx, "x", client.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Text() != "42" {
		t.Fatalf("native execute of x after runCode('x = 42'): %q (%+v)", ex.Text(), ex)
	}
	if ks := a.kernels.List(); len(ks) != 1 {
		t.Fatalf("kernels left: %+v, want the default one only", ks)
	}
}

// TestE2BCodeInterpreterLocalPath: an unchanged program, configured only
// by the three environment variables make run prints, runs
// Sandbox.create() and runCode against the agent (nodetest/local.mjs).
func TestE2BCodeInterpreterLocalPath(t *testing.T) {
	nodetest.Require(t, "nodetest", "@e2b/code-interpreter")
	a := newAgent(t)
	out := nodetest.Run(t, reaper, "nodetest", "local.mjs", []string{
		"E2B_API_URL=" + a.url, "E2B_SANDBOX_URL=" + a.url, "E2B_API_KEY=" + testToken,
		"E2B_DEBUG=", "E2B_ACCESS_TOKEN=", "E2B_DOMAIN=",
	})
	t.Logf("%s", out)
}
