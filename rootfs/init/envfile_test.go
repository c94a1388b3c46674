package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseEnv(t *testing.T) {
	in := `# comment
; also a comment

RAYITO_LISTEN=0.0.0.0:49983
export RAYITO_LOG_LEVEL=debug
  SPACED = value with spaces  
DQ="quoted value"
SQ='single # not a comment'
EMPTY=
HALF="unbalanced
`
	got, err := parseEnv(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"RAYITO_LISTEN=0.0.0.0:49983",
		"RAYITO_LOG_LEVEL=debug",
		"SPACED=value with spaces",
		"DQ=quoted value",
		"SQ=single # not a comment",
		"EMPTY=",
		`HALF="unbalanced`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestParseEnvRejectsGarbage(t *testing.T) {
	for _, in := range []string{"no equals sign", "=value", "BAD KEY=1"} {
		if _, err := parseEnv(strings.NewReader(in)); err == nil {
			t.Errorf("parseEnv(%q): no error", in)
		}
	}
}

func TestReadEnvFileMissingIsEmpty(t *testing.T) {
	env, err := readEnvFile(filepath.Join(t.TempDir(), "absent.env"))
	if err != nil || len(env) != 0 {
		t.Errorf("readEnvFile(absent) = %q, %v", env, err)
	}
}

func TestReadEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.env")
	if err := os.WriteFile(path, []byte("A=1\nB=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := readEnvFile(path)
	if err != nil || !reflect.DeepEqual(env, []string{"A=1", "B=2"}) {
		t.Errorf("readEnvFile = %q, %v", env, err)
	}
}

func TestMergeEnvLaterWins(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "HOME=/root"}, []string{"HOME=/home/user", "X=1", "X=2"})
	want := []string{"PATH=/bin", "HOME=/home/user", "X=2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
