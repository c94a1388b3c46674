package surface

import "testing"

// WithToken hands the current token to its callback, and nothing when no
// token is set, so a derived check fails closed.
func TestAuthWithToken(t *testing.T) {
	t.Parallel()
	a := NewAuth("")
	called := false
	if a.WithToken(func(string) bool { called = true; return true }) || called {
		t.Fatal("WithToken ran without a token set")
	}
	a.Set("first")
	a.Set("second")
	var seen string
	if !a.WithToken(func(tok string) bool { seen = tok; return true }) || seen != "second" {
		t.Fatalf("WithToken saw %q, want the current token", seen)
	}
	if a.WithToken(func(string) bool { return false }) {
		t.Fatal("WithToken did not return the callback's answer")
	}
}
