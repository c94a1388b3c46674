// Command standin-agent stands in for rayito-agent in the image until the
// real one builds: a static HTTP server on the agent's port with just what
// the VM tests need. It is test tooling, not part of the product.
//
//	GET  /health                   the protocol's health fields, plus "instance"
//	                               (random per process start) and "pid"
//	PUT  /standin/file?path=P      write the body to P
//	GET  /standin/file?path=P      read P
//	POST /standin/exit             exit with status 3 (to test restarts)
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	addr := os.Getenv("RAYITO_LISTEN")
	if addr == "" {
		addr = "0.0.0.0:49983"
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	instance := hex.EncodeToString(nonce[:])
	started := time.Now()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"status": "ok", "version": "standin", "resume_generation": 0,
			"kernel_state_lost": false, "kernels": []any{},
			"uptime_ms": time.Since(started).Milliseconds(),
			"instance":  instance, "pid": os.Getpid(),
		})
	})
	mux.HandleFunc("PUT /standin/file", func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(r.Body)
		if err == nil {
			err = os.WriteFile(r.URL.Query().Get("path"), data, 0o644)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /standin/file", func(w http.ResponseWriter, r *http.Request) {
		data, err := os.ReadFile(r.URL.Query().Get("path"))
		if errors.Is(err, fs.ErrNotExist) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(data)
	})
	mux.HandleFunc("POST /standin/exit", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			log.Print("standin-agent: exiting on request")
			os.Exit(3)
		}()
	})
	log.Printf("standin-agent %s listening on %s", instance, addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}
