# soda — build, test, benchmark, package.
#
#   make            build the binaries into bin/, all but soda-generator
#                   (the packages build it), and the mcpecho test fixture,
#                   and render the man pages
#   make run        bridge server-everything on 127.0.0.1:18100 (the README's demo)
#   make check      install test peers, then every test (what CI runs)
#   make fuzz       every fuzz target, FUZZTIME (10s) each (CI runs it
#                   after check; the seed corpora run in check too)
#   make test-hostload  the host-load tests (a fork bomb, a CPU burner in
#                   each kind of sandbox, the host measured), alone and
#                   one at a time (root; CI runs it after test-e2e)
#   make bench      soda-mcpd side by side with supergateway and mcp-proxy
#   make bench-sandbox  sodactl run side by side with codex sandbox and srt
#   make bench-sodad    a sandbox through sodad against a direct sodactl run
#   make bench-sessions persistent sandbox sessions against a cold sodactl run
#   make bench-validate soda-validated over HTTP against shellcheck directly
#   make bench-conformance  the MCP conformance runner, reference vs soda-mcpd
#   make bench-llm  the model gateway against a direct TLS request, in one run
#   make bench-images  sodactl run --image against the host's root; image pull
#                   against crane export | tar -x; a session's warm exec on
#                   an image against the host's root (root)
#   make bench-compare BEFORE=REV  this checkout against REV on soda's figures of
#                   bench, bench-sandbox and bench-sessions, in one run
#   make man        render man pages

GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/soda-project/soda/internal/version.Version=$(VERSION)
BINS    := soda-mcpd sodactl sodactl-full soda-sandbox-init sodad soda-validated
MANS    := man/sodactl.1 man/soda-mcpd.8 man/soda.conf.5 man/soda.7 man/soda-generator.8 man/soda-profile.5 man/sodad.8 man/soda-validated.8
EVERYTHING := test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js
# make lint vets the module for macOS too (GOOS=darwin), so that what is
# Linux stays in _linux.go files and every package that only describes,
# requests or audits sandboxes type-checks on other systems.

.PHONY: all build build-note test check fuzz test-go test-node test-hostload lint deps-test run bench bench-sandbox bench-sodad bench-sessions bench-validate bench-mcpconfig bench-metrics bench-conformance bench-llm bench-images bench-compare man clean

# The man pages need nothing the binaries do not: go-md2man comes from the
# Go module proxy as the product's modules do (tools/go.mod).
all: build man

build: build-note $(addprefix bin/,$(BINS)) bin/mcpecho

# A fresh clone waits for the Go modules and a cold build cache without a
# word from go build: say so, once (no bin/ yet).
build-note:
	@[ -d bin ] || echo "build: the first build downloads the Go modules and compiles everything: a few minutes"

# Static binaries (no cgo): soda-sandbox-init is executed as each sandbox's
# PID 1, so every millisecond of dynamic loading counts; nothing needs libc.
# sodactl finds bin/soda-sandbox-init next to itself (sandbox.FindInit).
bin/%: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/$*

# sodactl is built twice: lean (-tags soda_lean) as bin/sodactl, which
# every sandbox run starts, and whole as bin/sodactl-full, which the lean
# one executes for the commands it does not link (image, top, validate,
# sandbox mcp, run --image; see cmd/sodactl/handoff.go).
bin/sodactl: FORCE
	CGO_ENABLED=0 $(GO) build -tags soda_lean -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/sodactl

bin/sodactl-full: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/sodactl

bin/mcpecho: FORCE
	$(GO) build -o $@ ./test/mcpecho

FORCE:

# The npm peers the tests talk to (TypeScript SDK client, server-everything).
deps-test: test/node/node_modules/.package-lock.json

test/node/node_modules/.package-lock.json: test/node/package-lock.json
	@echo "deps-test: installing the MCP SDKs and server-everything into test/node (npm ci: a minute on a cold npm cache)"
	npm ci --prefix test/node --no-audit --no-fund
	@touch $@

# staticcheck is pinned as a tool dependency in tools/go.mod (not the
# product's go.mod); staticcheck.conf holds the checks it leaves out, each
# with its reason.
lint:
	@unformatted=$$(gofmt -l cmd internal test bench); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	GOOS=darwin $(GO) vet ./...
	$(GO) vet ./...
	$(GO) vet -tags soda_lean ./cmd/sodactl
	$(GO) tool -modfile=tools/go.mod staticcheck ./...
	$(GO) tool -modfile=tools/go.mod staticcheck -tags soda_lean ./cmd/sodactl

# With SODA_SKIPS=FILE (.ci/run sets it) go test runs through
# test/skipreport, which prints what go test would and records every
# test's outcome in FILE; "skipreport summary FILE" then lists the skips
# and, under CI=true, fails on one that hides a test the machine could run.
GOTEST  = $(if $(SODA_SKIPS),$(GO) run ./test/skipreport run $(SODA_SKIPS) -- $(GO) test -json,$(GO) test)
GOTESTV = $(if $(SODA_SKIPS),$(GO) run ./test/skipreport run -v $(SODA_SKIPS) -- $(GO) test -json,$(GO) test -v)

# -race needs cgo (gcc); the binaries under test stay static (bin/%).
test-go: deps-test
	@echo "test-go: every Go test, with the race detector (it compiles every package first: minutes on a cold cache)"
	$(GOTEST) -race -count=1 ./...
	$(GOTEST) -race -count=1 -tags soda_lean -run 'Lean|HandOff|FindFull' ./cmd/sodactl

test-node: deps-test build
	SODA_MCPD=$(CURDIR)/bin/soda-mcpd npm test --prefix test/node

# check is the whole suite: what CI and the README's test command run. Each
# part runs even when one before it failed, so that one failure never hides
# another; the last line names the parts that failed.
CHECKS := lint test-go test-node
check:
	@failed=; for t in $(CHECKS); do $(MAKE) --no-print-directory $$t || failed="$$failed $$t"; done; \
	if [ -n "$$failed" ]; then echo "check: FAILED:$$failed"; exit 1; fi; \
	echo "check: passed: $(CHECKS)"

test: check

# The fuzz targets of the parsers of untrusted input, as PACKAGE:TARGET.
# go test -fuzz takes one target of one package at a time: test/fuzz.sh
# runs each for FUZZTIME, all of them even when one fails. A failing
# input is written to the package's testdata/fuzz/TARGET/ (keep it there
# once fixed: it then runs with the seeds in every go test); a failure of
# Go's fuzzing engine whose input passes when replayed is said, and its
# target runs once more (test/fuzz.sh).
FUZZTIME ?= 10s
FUZZ := \
	./internal/sandbox/protect:FuzzGitConfigLines \
	./internal/sandbox/protect:FuzzGitConfigGit \
	./internal/sandboxinit:FuzzStripGitRuns \
	./internal/egress:FuzzConnectRequest \
	./internal/stdiorpc:FuzzCheckFrame \
	./internal/mcpbridge:FuzzSplitBody \
	./internal/sandboxsession:FuzzSnapshot \
	./internal/agentmcp:FuzzParse \
	./internal/clientconfig:FuzzAgentFiles \
	./internal/serverconf:FuzzParseOptions \
	./internal/llmgateway:FuzzMeter
fuzz:
	@GO=$(GO) bash test/fuzz.sh $(FUZZTIME) $(FUZZ)

# The tests that measure the host while a sandbox attacks it: alone (-p 1,
# nothing else of the suite running, which they would measure too), each
# against baselines taken just before and after it (testkit.Judge). The
# sandbox and sodad ones boot a systemd box (SODA_E2E=1, root).
test-hostload: deps-test
	SODA_HOSTLOAD=1 SODA_E2E=1 $(GOTESTV) -p 1 -count=1 -timeout 15m -run 'HostResponsive|HostLoad' \
		./test/session/ ./test/validate/ ./test/sandbox/ ./test/e2e/

# The demo server is read from this checkout, so its children run as the
# checkout's owner (a root soda-mcpd would otherwise run them as soda-mcp
# or nobody, which cannot read a clone in a 0700 home).
run: deps-test build
	@mkdir -p /var/lib/soda/mcp
	@echo "Connect a client:  ./bin/sodactl mcp client-config everything --client claude"
	@echo "Grant it to a sandboxed agent:  ./bin/sodactl run --mcp everything -- claude mcp list"
	./bin/soda-mcpd --name everything --listen 127.0.0.1:18100 --user "$$(stat -c %U $(CURDIR))" \
		--token-file /var/lib/soda/mcp/everything.token -- node $(EVERYTHING) stdio

bench: build
	bash bench/run.sh

bench-sandbox: build
	bash bench/sandbox.sh

# A sandbox through sodad against a direct sodactl run (systemd box).
bench-sodad:
	bash bench/sodad.sh

# Persistent sandbox sessions (sodactl sandbox mcp) against a cold
# sodactl run, in one run.
bench-sessions:
	bash bench/sessions.sh

# soda-validated over HTTP against the validator run directly, in one run.
bench-validate:
	bash bench/validate.sh

# A run with three per-run MCP servers (--mcp-config) against the agent's
# own stdio start of the same servers, in one run.
bench-mcpconfig:
	bash bench/mcpconfig.sh

# The bridge's throughput with its metrics on against off, in one run.
bench-metrics:
	bash bench/metrics.sh

# The official MCP conformance runner against the reference server directly
# and behind soda-mcpd; needs CONFORMANCE_SERVER (see bench/conformance.sh).
bench-conformance:
	bash bench/conformance.sh

# The model gateway against a direct TLS request to the same loopback
# upstream, in one run: added latency, time to first byte, throughput.
bench-llm:
	bash bench/llm.sh

bench-images:
	@mkdir -p bench/results
	SODA_BENCH=1 SODA_BENCH_OUT=$(CURDIR)/bench/results/latest-images.md $(GO) test -count=1 -v -run TestBenchImages ./test/images/
	SODA_BENCH=1 SODA_BENCH_OUT=$(CURDIR)/bench/results/latest-images-session.md $(GO) test -count=1 -v -run TestBenchImageSession ./test/session/

# This checkout ("after") against BEFORE (a git revision, built in a temporary
# worktree) on soda's own figures of bench, bench-sandbox (root) and
# bench-sessions, ROUNDS rounds in alternating order; knobs in bench/compare.sh.
bench-compare:
	BEFORE='$(BEFORE)' bash bench/compare.sh

man: $(MANS)

# go-md2man is pinned as a tool dependency in tools/go.mod (not the
# product's go.mod); go tool builds it once and caches it. The rendered
# pages are ignored by git (.gitignore) and removed by make clean.
man/%: man/%.md
	$(GO) tool -modfile=tools/go.mod go-md2man -in $< -out $@

clean:
	rm -rf bin dist $(MANS)

include packaging.mk
include test/e2e/e2e.mk
