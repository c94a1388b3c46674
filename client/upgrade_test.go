package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// TestUpgradeRepeatsALostAnswer: when the connection drops before the
// answer (the agent exec'd and the answer did not cross), Upgrade sends
// the same call again, under the same upgrade_id, and returns what the
// agent answers to it; progress hears of the repeat.
func TestUpgradeRepeatsALostAnswer(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Path      string `json:"path"`
			UpgradeID string `json:"upgrade_id"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		ids = append(ids, body.UpgradeID)
		first := len(ids) == 1
		mu.Unlock()
		if first {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close() // lost: no answer at all
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(client.UpgradeAnswer{UpgradeID: body.UpgradeID, State: "upgraded", ToVersion: "next"})
	}))
	defer srv.Close()
	var heard []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := client.Host{URL: srv.URL}.Upgrade(ctx, client.UpgradeOptions{Path: "/opt/agent", Progress: func(m string) { heard = append(heard, m) }})
	if err != nil || a.State != "upgraded" || a.ToVersion != "next" {
		t.Fatalf("Upgrade: %v, %+v", err, a)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] || a.UpgradeID != ids[0] {
		t.Fatalf("the calls' upgrade_ids %q, the answer's %q: want one id, sent twice", ids, a.UpgradeID)
	}
	if len(heard) != 1 {
		t.Fatalf("progress heard %q, want one repeat", heard)
	}
	if _, err := (client.Host{URL: srv.URL}).Upgrade(ctx, client.UpgradeOptions{}); err == nil {
		t.Fatal("an upgrade naming no binary was sent")
	}
}
