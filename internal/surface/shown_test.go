package surface_test

import (
	"net/http"
	"testing"

	"github.com/rayito/rayito-agent/internal/codeinterp"
	"github.com/rayito/rayito-agent/internal/envdapi"
	"github.com/rayito/rayito-agent/internal/jupyterapi"
	"github.com/rayito/rayito-agent/internal/surface"
)

// TestAuthShownInEveryForm: a connection counts as a known client's
// whichever surface's form carries the token, and never with a wrong one.
func TestAuthShownInEveryForm(t *testing.T) {
	t.Parallel()
	a := surface.NewAuth("s3cret")
	srv := surface.New(surface.Options{Auth: a})
	for _, tokens := range []surface.TokenFinder{surface.AgentTokens, envdapi.Tokens, jupyterapi.Tokens, codeinterp.Tokens} {
		srv.Mount(surface.Surface{Tokens: tokens})
	}
	forms := []func(r *http.Request, tok string){
		func(r *http.Request, tok string) { r.Header.Set("Authorization", "Bearer "+tok) },
		func(r *http.Request, tok string) { r.URL.RawQuery = "access_token=" + tok },
		func(r *http.Request, tok string) { r.Header.Set("X-Access-Token", tok) },
		func(r *http.Request, tok string) { r.Header.Set("E2B-Traffic-Access-Token", tok) },
		func(r *http.Request, tok string) { r.Header.Set("Authorization", "token "+tok) },
		func(r *http.Request, tok string) { r.URL.RawQuery = "token=" + tok },
	}
	for i, form := range forms {
		for tok, want := range map[string]bool{"s3cret": true, "s3cre": false, "": false} {
			r, _ := http.NewRequest("GET", "http://agent/x", nil)
			form(r, tok)
			if got := a.Shown(r); got != want {
				t.Errorf("form %d with %q: Shown %v, want %v", i, tok, got, want)
			}
		}
	}
	r, _ := http.NewRequest("GET", "http://agent/x", nil)
	if a.Shown(r) {
		t.Error("a request without a token was shown")
	}
}
