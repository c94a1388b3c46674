# rayito-agent: `make run` starts the agent, `make test` runs every test.
SHELL := /bin/bash
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED := 0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN := bin/rayito-agent
LISTEN ?= 127.0.0.1:49983
STATE_DIR ?= $(CURDIR)/build/state
# A development token; set RAYITO_ACCESS_TOKEN to choose your own.
DEV_TOKEN := $(or $(RAYITO_ACCESS_TOKEN),dev-$(shell head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'))

# Debian packages the tests need: a real ipykernel, QEMU and the image build tools.
TEST_PACKAGES := python3-ipykernel qemu-system-x86 busybox-static debootstrap e2fsprogs procps

.PHONY: all build run test unit deps bench fuzz lint clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rayito-agent

run: build
	@mkdir -p $(STATE_DIR)
	@echo "rayito-agent $(VERSION) on ws://$(LISTEN)"
	@echo "token: $(DEV_TOKEN)"
	@echo "try:   RAYITO_ACCESS_TOKEN=$(DEV_TOKEN) $(BIN) exec --url ws://$(LISTEN) -- echo hello"
	RAYITO_ACCESS_TOKEN=$(DEV_TOKEN) $(BIN) serve --listen $(LISTEN) --state-dir $(STATE_DIR) --log-level info

# deps installs what the tests need, only when something is missing.
deps:
	@missing=""; for p in $(TEST_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends $$missing || { apt-get update && apt-get install -y --no-install-recommends $$missing; }; \
	fi

# unit runs the Go tests with the race detector.
unit: deps
	$(GO) vet ./...
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m ./...

test: unit

bench: deps
	CGO_ENABLED=1 $(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeData$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./internal/wire

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

clean:
	rm -rf bin build
