package client_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/netconf"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/resume"
)

// jsonFields lists a struct type's JSON field names with their kinds,
// following nested structs, slices and pointers: what a decoder of the
// agent's answers sees.
func jsonFields(t reflect.Type, prefix string, out map[string]reflect.Kind) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			jsonFields(f.Type, prefix, out) // its fields are the outer's
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		kind := ft.Kind()
		switch kind { // what JSON tells apart
		case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64, reflect.Uint32, reflect.Float64:
			kind = reflect.Float64
		}
		out[prefix+name] = kind
		jsonFields(ft, prefix+name+".", out)
	}
}

// TestClientMirrorsTheAgentsAnswers: the SDK's copies of the agent's
// answer types (it cannot import the agent's packages) have every field
// the agent sends, under the same name, of a kind that decodes it.
func TestClientMirrorsTheAgentsAnswers(t *testing.T) {
	for _, pair := range []struct {
		name          string
		agent, client any
	}{
		{"Isolation", proc.Isolation{}, client.Isolation{}},
		{"PauseAnswer", resume.PauseAnswer{}, client.PauseAnswer{}},
		{"HookResult", resume.HookResult{}, client.HookResult{}},
		{"LastResume", resume.LastResume{}, client.LastResume{}},
		{"UpgradeAnswer", resume.UpgradeAnswer{}, client.UpgradeAnswer{}},
		{"NetworkRepair", netconf.Report{}, client.NetworkRepair{}},
	} {
		want, got := map[string]reflect.Kind{}, map[string]reflect.Kind{}
		jsonFields(reflect.TypeOf(pair.agent), "", want)
		jsonFields(reflect.TypeOf(pair.client), "", got)
		var missing []string
		for name, kind := range want {
			if g, ok := got[name]; !ok || g != kind {
				missing = append(missing, name+" ("+kind.String()+", the SDK has "+g.String()+")")
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("client.%s lacks or mistypes what the agent sends: %s", pair.name, strings.Join(missing, "; "))
		}
	}
}
