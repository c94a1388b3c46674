package endpoint

import (
	"github.com/rayito/rayito-agent/internal/surface/surfacetest"
	"testing"
)

func (a *testAgent) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	return surfacetest.Get(t, a.http.URL+path, testToken)
}
