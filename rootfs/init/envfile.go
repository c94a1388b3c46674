package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// readEnvFile reads KEY=VALUE lines in the subset of systemd's
// EnvironmentFile syntax that both integrations can share: blank lines and
// lines starting with # or ; are skipped, an optional "export " prefix is
// dropped, and a value wholly in single or double quotes is unquoted.
// A missing file is an empty environment, as with EnvironmentFile=-PATH.
func readEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseEnv(f)
}

func parseEnv(r io.Reader) ([]string, error) {
	var env []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t\"'") {
			return nil, fmt.Errorf("line %d: not KEY=VALUE", n)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		env = append(env, key+"="+value)
	}
	return env, sc.Err()
}

// mergeEnv returns base with the entries of over added, later keys winning.
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	index := make(map[string]int)
	for _, kv := range append(append([]string{}, base...), over...) {
		key, _, _ := strings.Cut(kv, "=")
		if i, ok := index[key]; ok {
			out[i] = kv
			continue
		}
		index[key] = len(out)
		out = append(out, kv)
	}
	return out
}
