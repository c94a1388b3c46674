package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/nodetest"
)

// browserBound bounds the whole browser run: a hung page must not hang
// the suite.
const browserBound = 5 * time.Minute

// TestBrowsers: pages in headless Chromium on another origin than the
// agent's call it with the real clients (nodetest/page.mjs): the e2b SDK
// (a command, a background command's output, 1 MiB written and read back,
// a watch), @jupyterlab/services (a result, input() answered, an
// interrupt) and the native protocol over the browser's WebSocket; the
// same page across a resume; an agent whose --allowed-origins leaves the
// page out refuses every one of them; and Jupyter Notebook in gateway
// mode runs a typed cell on a kernel the agent started.
func TestBrowsers(t *testing.T) {
	if testing.Short() && os.Getenv("RAYITO_NODE_TESTS") == "" {
		t.Skip("browser tests run under make")
	}
	nodetest.Require(t, "nodetest", "puppeteer-core")
	chromium := nodetest.RequireProgram(t, "chromium")
	notebook := nodetest.RequireProgram(t, "jupyter-notebook")

	const token = "browser-token"
	agent := "http" + strings.TrimPrefix(startAgent(t, token), "ws")
	narrow := "http" + strings.TrimPrefix(startAgent(t, token, "--allowed-origins", "https://ide.example.com"), "ws")
	nb, nbToken, nbFile := startNotebook(t, notebook, agent, token)

	profile := filepath.Join(t.TempDir(), "chromium-profile")
	t.Cleanup(func() { killUsing(profile) })
	artifacts, err := filepath.Abs("../../build/browser-test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "browser.mjs")
	cmd.Dir = "nodetest"
	cmd.Env = append(os.Environ(),
		"RAYITO_AGENT="+agent, "RAYITO_NARROW="+narrow, "RAYITO_TOKEN="+token,
		"RAYITO_TMP="+t.TempDir(), "RAYITO_CHROMIUM="+chromium, "RAYITO_PROFILE="+profile,
		"RAYITO_ARTIFACTS="+artifacts,
		"RAYITO_NOTEBOOK="+nb, "RAYITO_NOTEBOOK_TOKEN="+nbToken, "RAYITO_NOTEBOOK_FILE="+nbFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatalf("the browser run failed: %v (what it saw is above; screenshots and console logs in %s)", err, artifacts)
	}
	for _, c := range []string{"e2b", "jupyter", "native", "beforeResume", "afterResume", "refused"} {
		if !strings.Contains(out.String(), "ok "+c+" ") {
			t.Errorf("case %s did not pass", c)
		}
	}

	// The notebook's cell ran on a kernel the agent started.
	m := regexp.MustCompile(`notebook kernel pid: (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("the notebook's cell printed no pid")
	}
	pid, _ := strconv.Atoi(m[1])
	c, err := client.Dial(ctx, agent, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ks, err := c.Kernels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range ks {
		found = found || k.Pid == pid
	}
	if !found {
		t.Fatalf("the notebook's kernel pid %d is not one of the agent's kernels %+v", pid, ks)
	}
}

// startNotebook runs Debian's Jupyter Notebook (6.4) in gateway mode, its
// kernels on the agent, with a notebook file for Python 3 in its
// directory; it returns its URL, token and the file's name.
func startNotebook(t *testing.T, bin, agent, agentToken string) (url, token, file string) {
	t.Helper()
	dir, home := t.TempDir(), t.TempDir()
	file, token = "rayito.ipynb", "notebook-token"
	nbJSON := `{"cells": [{"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": [], "source": []}],
 "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
 "nbformat": 4, "nbformat_minor": 5}`
	if err := os.WriteFile(filepath.Join(dir, file), []byte(nbJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--no-browser", "--allow-root", "--ip=127.0.0.1", "--port="+strconv.Itoa(port), "--port-retries=0",
		"--NotebookApp.token="+token, "--notebook-dir="+dir,
		"--gateway-url="+agent, "--GatewayClient.auth_token="+agentToken,
		// Kernel starts are slow on a loaded two-core machine.
		"--GatewayClient.request_timeout=120", "--GatewayClient.connect_timeout=60")
	// Its own configuration and runtime dirs: nothing from this machine's.
	cmd.Env = append(os.Environ(), "HOME="+home, "JUPYTER_CONFIG_DIR="+filepath.Join(home, "config"),
		"JUPYTER_DATA_DIR="+filepath.Join(home, "data"), "JUPYTER_RUNTIME_DIR="+filepath.Join(home, "runtime"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		kill := time.AfterFunc(10*time.Second, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		cmd.Wait()
		kill.Stop()
		if t.Failed() {
			t.Logf("jupyter-notebook's log:\n%s", log.String())
		}
	})
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(url + "/api?token=" + token)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return url, token, file
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jupyter-notebook did not start: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killUsing kills every process whose command line names path: a browser
// puppeteer started in a process group of its own, left behind if the
// script was killed.
func killUsing(path string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(path)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
