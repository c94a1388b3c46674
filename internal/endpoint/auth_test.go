package endpoint

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// protectedRoutes is every route of the native and host surfaces but
// /health, so a route added later is checked too.
func protectedRoutes(a *testAgent) []route {
	var out []route
	for _, sf := range a.surfaces {
		for _, rt := range sf.Routes {
			m, path, _ := strings.Cut(rt.Pattern, " ")
			if path == "/health" {
				continue
			}
			out = append(out, route{m, path})
		}
	}
	return out
}

// route is one method on one path.
type route struct{ method, path string }

// statusWith sends method path with an Authorization header (none if
// header is "") or an access_token query parameter.
func (a *testAgent) statusWith(t *testing.T, method, path, header, query string) int {
	t.Helper()
	u := a.http.URL + path
	if query != "" {
		u += "?access_token=" + url.QueryEscape(query)
	}
	req, _ := http.NewRequest(method, u, strings.NewReader("{}"))
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAuthRefusesNearMisses: on every protected route, only the token
// itself passes: not a prefix of it, not the token with more appended,
// not an empty bearer, not another scheme.
func TestAuthRefusesNearMisses(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	routes := protectedRoutes(a)
	if len(routes) < 5 {
		t.Fatalf("routes %v: the table lost some", routes)
	}
	var headers, queries []string
	for i := 1; i < len(testToken); i++ {
		headers = append(headers, "Bearer "+testToken[:i])
		queries = append(queries, testToken[:i])
	}
	headers = append(headers, "Bearer "+testToken+"x", "Bearer "+testToken+" x", "Bearer x"+testToken,
		"Bearer ", "Bearer", "Basic "+testToken, testToken, "Bearer  ")
	queries = append(queries, testToken+"x", " ")
	for _, rt := range routes {
		method, path := rt.method, rt.path
		for _, h := range headers {
			if got := a.statusWith(t, method, path, h, ""); got != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q: %d, want 401", method, path, h, got)
			}
			// A bad header is not rescued by a good query parameter.
			if got := a.statusWith(t, method, path, h, testToken); got != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q and the right access_token: %d, want 401", method, path, h, got)
			}
		}
		for _, q := range queries {
			if got := a.statusWith(t, method, path, "", q); got != http.StatusUnauthorized {
				t.Errorf("%s %s with access_token %q: %d, want 401", method, path, q, got)
			}
		}
		if got := a.statusWith(t, method, path, "", ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s with no token: %d, want 401", method, path, got)
		}
		// The token itself passes, in either place.
		if got := a.statusWith(t, method, path, "Bearer "+testToken, ""); got == http.StatusUnauthorized {
			t.Errorf("%s %s with the token: 401", method, path)
		}
		if got := a.statusWith(t, method, path, "", testToken); got == http.StatusUnauthorized {
			t.Errorf("%s %s with the token as access_token: 401", method, path)
		}
	}
}

// TestNoTokenOpensNothing: an agent with no token yet refuses every
// protected route whatever a caller sends; only the first /v1/init is
// open (it is how the host sets the token).
func TestNoTokenOpensNothing(t *testing.T) {
	t.Parallel()
	a := newTestAgentWithToken(t, "")
	for _, rt := range protectedRoutes(a) {
		method, path := rt.method, rt.path
		if path == "/v1/init" {
			continue
		}
		for _, h := range []string{"", "Bearer ", "Bearer anything", "Bearer " + testToken} {
			if got := a.statusWith(t, method, path, h, ""); got != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q and no token configured: %d, want 401", method, path, h, got)
			}
		}
		if got := a.statusWith(t, method, path, "", "anything"); got != http.StatusUnauthorized {
			t.Errorf("%s %s with an access_token and no token configured: %d, want 401", method, path, got)
		}
	}
	if got := a.statusWith(t, "GET", "/health", "", ""); got != http.StatusOK {
		t.Fatalf("/health: %d", got)
	}
}
