# rayito-agent: `make run` starts the agent, `make test` runs every test.
SHELL := /bin/bash
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED := 0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# The agent serves and dials plain HTTP/1.1 (websockets, Connect's unary
# and server-streaming calls): net/http's HTTP/2, which only TLS or an
# explicit h2c setup would use, is left out (0.5 MiB of the binary).
TAGS := nethttpomithttp2
BIN := bin/rayito-agent
LISTEN ?= 127.0.0.1:49983
STATE_DIR ?= $(CURDIR)/build/state
# make run's token: RAYITO_ACCESS_TOKEN if set, else one made once and
# kept in the state directory (mode 0600), so an exported token still
# works after a restart.
DEV_TOKEN_FILE := $(STATE_DIR)/dev-token

# Debian packages the unit tests need: a real ipykernel, ps, and mkfs.ext4
# (a small ext4 with blocks kept for root), numpy (clone-safety tests reseed
# its global state); the image build and VM tools
# come from rootfs/deps.sh.
# chromium and jupyter-notebook: pages in a real browser, and Notebook in
# gateway mode, call the agent (cmd/rayito-agent/browser_test.go).
# matplotlib: an E2B user's first chart (codeinterp's TestFirstChart).
TEST_PACKAGES := python3-ipykernel python3-numpy python3-matplotlib procps e2fsprogs chromium jupyter-notebook

.PHONY: all build run test unit deps node-deps bench bench-agent bench-envd fuzz lint clean proto

all: build

# The binary is a file target so the image is rebuilt only when it changed.
GO_SOURCES := $(shell find cmd internal -name '*.go' -not -name '*_test.go') go.mod go.sum
$(BIN): $(GO_SOURCES)
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rayito-agent

build: $(BIN)

# The VM image carries the real agent.
AGENT := $(BIN)
include rootfs/Makefile.inc

# The agent leaves this machine's clock alone (--set-clock=false): that
# is only its job inside a sandbox VM. --e2b-api answers the e2b SDK's
# control-plane calls, so an unchanged E2B program runs against it with
# the three E2B_ variables make run prints.
run: build
	@$(call apt_install,$(RUN_PACKAGES))
	@mkdir -p $(STATE_DIR)
	@if [ -z "$$RAYITO_ACCESS_TOKEN" ] && [ ! -s $(DEV_TOKEN_FILE) ]; then \
		(umask 077; echo "dev-$$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" > $(DEV_TOKEN_FILE)); fi
	@token="$${RAYITO_ACCESS_TOKEN:-$$(cat $(DEV_TOKEN_FILE))}"; \
	echo "rayito-agent $(VERSION) on ws://$(LISTEN)"; \
	echo "token: $$token"; \
	echo "try:   export RAYITO_ACCESS_TOKEN=$$token RAYITO_URL=ws://$(LISTEN)"; \
	echo "       $(BIN) exec -- echo hello"; \
	echo "e2b:   export E2B_API_URL=http://$(LISTEN) E2B_SANDBOX_URL=http://$(LISTEN) E2B_API_KEY=$$token"; \
	RAYITO_ACCESS_TOKEN=$$token exec $(BIN) serve --listen $(LISTEN) --state-dir $(STATE_DIR) --log-level info --set-clock=false --e2b-api

# deps installs what the tests need, only when something is missing.
deps: rootfs-deps
	@echo "==> Debian packages the tests need (installed only when missing)"
	@$(call apt_install,$(TEST_PACKAGES))

# apt_install installs the Debian packages of its argument that are
# missing, with one apt-get (after an update only if that failed).
define apt_install
missing=""; for p in $(1); do \
	dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
done; \
if [ -n "$$missing" ]; then \
	echo "installing:$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends $$missing || { apt-get update && apt-get install -y --no-install-recommends $$missing; }; \
fi
endef

# run-code needs a kernel: make run installs python3-ipykernel when
# missing, so the README's run-code works on the first try, and
# matplotlib, so an E2B user's first chart does too.
RUN_PACKAGES := python3-ipykernel python3-matplotlib

# Node tests drive the agent with the real npm client packages. Each folder
# internal/*/nodetest and cmd/*/nodetest holds a package.json and its package-lock.json;
# node-deps installs the pinned packages when they are missing or older
# than the lock file. With RAYITO_NODE_TESTS=1 (as make sets it) the Go
# tests that run node fail instead of skipping when they are missing.
NODE_TEST_DIRS := $(patsubst %/package.json,%,$(wildcard internal/*/nodetest/package.json cmd/*/nodetest/package.json))
node-deps:
	@echo "==> npm packages the compatibility tests drive (installed only when missing)"
	@for d in $(NODE_TEST_DIRS); do \
		[ $$d/node_modules/.package-lock.json -nt $$d/package-lock.json ] && continue; \
		echo "npm ci in $$d"; (cd $$d && npm ci --no-audit --no-fund --loglevel=error) || exit 1; \
	done

# unit runs the Go tests with the race detector; -short leaves the VM
# tests to e2e, so they do not compete for the two cores. One go test per
# package, as many at once as there are CPUs: each package's result is
# printed as it finishes (one go test ./... prints them in order, so a
# slow first package kept it silent for minutes).
unit: deps node-deps
	@echo "==> go vet"
	$(GO) vet ./...
	@echo "==> unit tests with the race detector (5 to 10 minutes on 2 cores; each package's result as it finishes)"
	@$(GO) list ./... | RAYITO_NODE_TESTS=1 CGO_ENABLED=1 xargs -P $$(nproc) -n 1 $(GO) test -race -short -count=1 -timeout 30m
	@# A skip must never read as a pass: say which tests this machine
	@# cannot run, and where they run instead.
	@out=$$($(GO) test -short -count=1 -v -run '^TestCgroupV2' ./internal/proc/ 2>&1); \
	n=$$(printf '%s\n' "$$out" | grep -c -- '--- SKIP' || true); all=$$(printf '%s\n' "$$out" | grep -c -- '^=== RUN' || true); \
	echo "==> $$n of the $$all cgroup v2 tests of internal/proc skipped here (they need cgroup v2 at the root); make e2e runs them in the VM (TestAgentStaysInCharge), where a skip fails"

# test is everything: unit tests, then the image and the VM tests.
test: unit e2e

# bench-agent runs the headline rows: the agent as users run it (the
# static binary, `serve` in a process of its own), each row with its
# baselines measured in the same run (docs/benchmarks.md).
bench-agent: deps
	$(GO) test -run '^$$' -bench 'AgentExec$$' -benchtime 2000x -timeout 60m ./cmd/rayito-agent/
	$(GO) test -run '^$$' -bench 'AgentOutput' -benchtime 5x -timeout 60m ./cmd/rayito-agent/
	$(GO) test -run '^$$' -bench 'AgentPTYEcho' -benchtime 3000x -timeout 60m ./cmd/rayito-agent/
	$(GO) test -run '^$$' -bench 'AgentMemory|AgentBufferHeld|IdleFootprint' -benchtime 1x -timeout 60m ./cmd/rayito-agent/
	$(GO) test -run '^$$' -bench 'AgentExecChurn' -benchtime 20000x -timeout 60m ./cmd/rayito-agent/

# bench-envd runs E2B's envd beside the agent, driven by the same client
# code (docs/benchmarks.md, "Side by side with envd"): ENVD names an envd
# binary, for example one built from e2b-dev/infra's packages/envd with
# `CGO_ENABLED=0 go build -ldflags "-s -w"`. The output row runs twice:
# quiet, and with two busy loops beside the agent and envd.
bench-envd: deps
	@test -x "$(ENVD)" || { echo "bench-envd: set ENVD to an envd binary (make bench-envd ENVD=/path/to/envd)"; exit 2; }
	RAYITO_BENCH_ENVD=$(ENVD) $(GO) test -run '^$$' -bench 'EnvdExec$$' -benchtime 1000x -timeout 60m ./cmd/rayito-agent/
	RAYITO_BENCH_ENVD=$(ENVD) $(GO) test -run '^$$' -bench 'EnvdOutput$$' -benchtime 4x -timeout 60m ./cmd/rayito-agent/
	RAYITO_BENCH_ENVD=$(ENVD) RAYITO_BENCH_BUSY=2 $(GO) test -run '^$$' -bench 'EnvdOutput$$' -benchtime 4x -timeout 60m ./cmd/rayito-agent/
	RAYITO_BENCH_ENVD=$(ENVD) $(GO) test -run '^$$' -bench 'EnvdMemoryAfterWork$$' -benchtime 1x -timeout 60m ./cmd/rayito-agent/

# bench is the headline rows, then every package's own benchmarks (the
# breakdown, in process).
# The Jupyter surfaces' benchmark also measures Debian's jupyter_server.
BENCH_PACKAGES := python3-jupyter-server
bench: bench-agent
	@$(MAKE) --no-print-directory deps TEST_PACKAGES="$(BENCH_PACKAGES)"
	CGO_ENABLED=1 $(GO) test -run '^$$' -bench . -skip '^Benchmark(Agent|Envd|IdleFootprint)' -benchmem -timeout 60m ./...

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeData$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./internal/wire

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

clean:
	rm -rf bin build

# proto regenerates the Go code of the envd-compatible API from our .proto
# files; the generated code is committed, so only changing a .proto needs
# it. The generators are pinned to the versions in go.mod, and protoc (with
# the well-known types) comes from Debian.
PROTO_DIR := internal/envdapi/proto
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
proto:
	@command -v protoc >/dev/null && [ -f /usr/include/google/protobuf/timestamp.proto ] || { \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev || \
		{ apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev; }; }
	@$(GOBIN_DIR)/protoc-gen-go --version 2>/dev/null | grep -q ' $(PROTOC_GEN_GO_VERSION)$$' || \
		$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@$(GOBIN_DIR)/protoc-gen-connect-go --version 2>/dev/null | grep -q '$(PROTOC_GEN_CONNECT_GO_VERSION:v%=%)$$' || \
		$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	PATH=$(GOBIN_DIR):$$PATH protoc -I $(PROTO_DIR) -I /usr/include \
		--go_out=. --go_opt=module=github.com/rayito/rayito-agent \
		--connect-go_out=. --connect-go_opt=module=github.com/rayito/rayito-agent \
		$$(cd $(PROTO_DIR) && find . -name '*.proto' | sed 's|^\./||' | sort)
