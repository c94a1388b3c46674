package proc

import (
	"errors"
	"os/user"
	"testing"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Defaults.User answers who a request runs as, by the same rules as
// Resolve, read from the real user database.
func TestDefaultsUser(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody on this machine")
	}
	for _, tc := range []struct {
		def, name      string
		wantUser, home string
		wantErr        bool
	}{
		{name: "", wantUser: me.Username, home: me.HomeDir},
		{name: "nobody", wantUser: "nobody", home: nobody.HomeDir},
		{name: nobody.Uid, wantUser: "nobody", home: nobody.HomeDir},
		{def: "nobody", name: "", wantUser: "nobody", home: nobody.HomeDir},
		{def: "nobody", name: me.Username, wantUser: me.Username, home: me.HomeDir},
		{name: "no-such-user-rayito", wantErr: true},
	} {
		d := &Defaults{}
		d.Set(tc.def, "", nil)
		got, home, err := d.User(tc.name)
		if tc.wantErr {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
				t.Errorf("User(%q) error %v, want bad_request", tc.name, err)
			}
			continue
		}
		if err != nil || got != tc.wantUser || home != tc.home {
			t.Errorf("default %q, User(%q) = %q %q %v; want %q %q", tc.def, tc.name, got, home, err, tc.wantUser, tc.home)
		}
	}
}
