package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/nodetest"
)

// TestDocSnippets runs every runnable snippet of the README and the docs,
// as a reader would: fenced blocks marked sh are run by bash against a
// test agent, js by Node as ES modules, go compiled. Blocks without a
// language (wire examples, layouts) and indented ones (a VMM's command
// line) are illustrations. The docs' address, 127.0.0.1:49983, becomes
// the test agent's; `make run` is run on a free port; `make test` is what
// CI runs. A snippet fails when a command of ours reports an error (a
// usage, a refused token, an unknown flag), when a script exits non-zero,
// and when a `// X === Y` comment of a js snippet does not hold.
func TestDocSnippets(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const token = "docs-token"
	agent := startAgentWith(t, token, agentOptions{flags: "--e2b-api"})
	addr := strings.TrimPrefix(agent.url, "ws://")
	bin := agentBinary(t)
	for _, s := range docSnippets(t, root) {
		t.Run(fmt.Sprintf("%s:%d", s.file, s.line), func(t *testing.T) {
			body := strings.ReplaceAll(s.body, "127.0.0.1:49983", addr)
			switch s.lang {
			case "sh":
				runShellSnippet(t, root, s.file, body, bin, token, addr)
			case "js":
				runJSSnippet(t, root, body, token, addr)
			case "go":
				compileGoSnippet(t, root, body)
			default:
				t.Fatalf("a %q block: mark it sh, js or go to have it run, or leave its language out for an illustration", s.lang)
			}
		})
	}
}

// snippet is one fenced code block.
type snippet struct {
	file, lang, body string
	line             int
}

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")

// docSnippets are the README's and the docs' blocks that carry a
// language other than the illustrations'.
func docSnippets(t *testing.T, root string) []snippet {
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []snippet
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllSubmatchIndex(b, -1) {
			lang := string(b[m[2]:m[3]])
			switch lang {
			case "", "json", "text":
				continue
			}
			rel, _ := filepath.Rel(root, f)
			out = append(out, snippet{file: rel, lang: lang, body: string(b[m[4]:m[5]]), line: bytes.Count(b[:m[0]], []byte("\n")) + 1})
		}
	}
	if len(out) == 0 {
		t.Fatal("no snippets found")
	}
	return out
}

// clientError is a line in which one of our commands says it failed.
var clientError = regexp.MustCompile(`(?m)^(rayito-agent( [a-z-]+)?: |usage: rayito-agent|flag provided but not defined)`)

// runShellSnippet runs a sh block in a directory laid out as a checkout
// after make run (bin/rayito-agent, build/state/dev-token, a data.csv),
// against the test agent. operations.md's host example starts on an
// agent without a token, as a host meets it. `make test` is CI's own
// command; `make run` is run on a free port until it serves.
func runShellSnippet(t *testing.T, root, file, body, bin, token, addr string) {
	var script []string
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "make test"):
			continue
		case strings.HasPrefix(line, "make run"):
			checkMakeRun(t, root)
			continue
		}
		script = append(script, line)
	}
	if strings.TrimSpace(strings.Join(script, "")) == "" {
		return
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.MkdirAll(filepath.Join(dir, "build", "state"), 0o755)
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "rayito-agent")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "build", "state", "dev-token"), []byte(token+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n"), 0o644)
	env := append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "RAYITO_URL=ws://"+addr,
		"RAYITO_ACCESS_TOKEN=", "TOKEN="+token)
	if file == filepath.Join("docs", "operations.md") {
		fresh := startAgentWith(t, "", agentOptions{})
		env = append(env, "RAYITO_URL="+fresh.url)
	}
	cmd := exec.Command("bash", "-c", strings.Join(script, "\n")+"\necho snippet-end")
	cmd.Dir, cmd.Env = dir, env
	out, err := runBounded(t, cmd)
	if !strings.HasSuffix(strings.TrimSpace(out), "snippet-end") || clientError.MatchString(out) {
		t.Fatalf("the snippet failed (%v):\n%s", err, out)
	}
	t.Logf("%s", out)
}

// runBounded runs cmd with its output combined, killed with its process
// group after two minutes.
func runBounded(t *testing.T, cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	err := cmd.Wait()
	return out.String(), err
}

// checkMakeRun runs make run on a free port and a state directory of its
// own until the agent it starts answers /health, then stops it.
func checkMakeRun(t *testing.T, root string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command("make", "--no-print-directory", "run", "LISTEN="+addr, "STATE_DIR="+t.TempDir())
	cmd.Dir = root
	// A make of its own, not a part of the make that may run the tests.
	cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN=", "MAKEFLAGS=", "MAKELEVEL=", "MFLAGS=")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		cmd.Wait()
	}()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run did not serve on %s:\n%s", addr, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{"token: dev-", "E2B_API_URL=http://" + addr, "RAYITO_URL=ws://" + addr} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("make run does not print %q:\n%s", want, out.String())
		}
	}
}

// nodeDirs are the folders whose node_modules hold each package a js
// snippet imports.
var nodeDirs = map[string]string{
	"e2b":                   "internal/envdapi/nodetest",
	"@e2b/code-interpreter": "internal/codeinterp/nodetest",
	"@jupyterlab/services":  "internal/jupyterapi/nodetest",
}

var (
	importFrom = regexp.MustCompile(`(?m)^import .* from '([^']+)'`)
	claim      = regexp.MustCompile(`(?m)^(\s*\S.*?)\s+// (\S+) === (.+)$`)
)

// runJSSnippet runs a js block as an ES module, beside the pinned
// packages it imports, with the environment make run tells a user to
// export; its `// X === Y` comments become assertions.
func runJSSnippet(t *testing.T, root, body, token, addr string) {
	dir, pkg := "", ""
	for _, m := range importFrom.FindAllStringSubmatch(body, -1) {
		if d, ok := nodeDirs[m[1]]; ok {
			dir, pkg = d, m[1]
		}
	}
	if dir == "" {
		t.Fatalf("the snippet imports no package the tests pin (%v)", importFrom.FindAllString(body, -1))
	}
	nodetest.Require(t, filepath.Join(root, dir), pkg)
	body = claim.ReplaceAllString(body, "$1\nassert.deepStrictEqual($2, $3);")
	body = "import assert from 'node:assert/strict';\n" + body
	f, err := os.CreateTemp(filepath.Join(root, dir), ".snippet-*.mjs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	f.WriteString(body)
	f.Close()
	cmd := exec.Command("node", f.Name())
	cmd.Dir = filepath.Join(root, dir)
	cmd.Env = append(os.Environ(), "RAYITO_ACCESS_TOKEN="+token, "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr,
		"E2B_API_KEY="+token, "E2B_DEBUG=", "E2B_ACCESS_TOKEN=", "E2B_DOMAIN=")
	out, err := runBounded(t, cmd)
	if err != nil {
		t.Fatalf("node ran the snippet with %v:\n%s\n%s", err, body, out)
	}
	t.Logf("%s", out)
}

// compileGoSnippet compiles a go block as the body of a function, with
// the imports it names and its variables used, inside the module.
func compileGoSnippet(t *testing.T, root, body string) {
	imports := map[string]string{"client.": "github.com/rayito/rayito-agent/client", "io.": "io", "fmt.": "fmt", "time.": "time", "os.": "os"}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n\t\"context\"\n")
	for use, path := range imports {
		if strings.Contains(body, use) {
			fmt.Fprintf(&src, "\t%q\n", path)
		}
	}
	src.WriteString(")\n\nfunc main() {\n\tctx, token := context.Background(), \"\"\n\t_, _ = ctx, token\n" + body + "\n")
	// Every variable the snippet declares is used, as the code around a
	// snippet would.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src.String()+"}\n", 0)
	if err != nil {
		t.Fatalf("the snippet does not parse: %v\n%s", err, body)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
			for _, lhs := range as.Lhs {
				if id, ok := lhs.(*ast.Ident); ok && id.Name != "_" {
					fmt.Fprintf(&src, "\t_ = %s\n", id.Name)
				}
			}
		}
		return true
	})
	src.WriteString("}\n")
	dir, err := os.MkdirTemp(root, "_snippet-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "main.go")
	os.WriteFile(file, []byte(src.String()), 0o644)
	out, err := exec.Command("go", "build", "-o", os.DevNull, file).CombinedOutput()
	if err != nil {
		sc := bufio.NewScanner(strings.NewReader(src.String()))
		var numbered strings.Builder
		for i := 1; sc.Scan(); i++ {
			fmt.Fprintf(&numbered, "%3d %s\n", i, sc.Text())
		}
		t.Fatalf("the snippet does not compile: %v\n%s\n%s", err, out, numbered.String())
	}
}
