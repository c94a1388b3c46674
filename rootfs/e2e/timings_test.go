package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// timingLog collects the measurements the tests log, so that a run can
// also write them as a markdown table (RAYITO_E2E_TIMINGS=path).
type timingLog struct {
	mu   sync.Mutex
	rows []timingRow
}

type timingRow struct {
	what   string
	values []string
}

// timings is shared by the tests of this binary; TestMain writes it.
var timings timingLog

// add logs and records a duration under what.
func (l *timingLog) add(t *testing.T, what string, d time.Duration) {
	t.Helper()
	l.addValue(t, what, d.Round(10*time.Millisecond).String())
}

// addValue logs and records any measurement, such as a size.
func (l *timingLog) addValue(t *testing.T, what, value string) {
	t.Helper()
	t.Logf("timing: %s: %s", what, value)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.rows {
		if l.rows[i].what == what {
			l.rows[i].values = append(l.rows[i].values, value)
			return
		}
	}
	l.rows = append(l.rows, timingRow{what: what, values: []string{value}})
}

// writeIfAsked writes the table to $RAYITO_E2E_TIMINGS, if set.
func (l *timingLog) writeIfAsked() {
	path := os.Getenv("RAYITO_E2E_TIMINGS")
	if path == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s, load average at the end %s\n\n", time.Now().UTC().Format(time.RFC3339), loadAverage())
	b.WriteString("| what | measured |\n|---|---|\n")
	for _, r := range l.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r.what, strings.Join(r.values, ", "))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: writing timings:", err)
	}
}

// loadAverage is the host's 1, 5 and 15 minute load.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
