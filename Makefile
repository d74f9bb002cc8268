# Cove's build. `make gen` regenerates the committed protobuf/Connect code with pinned tools.
GO        ?= go
BIN       := $(CURDIR)/bin
BUF_VER   := v1.50.0
PGG_VER   := v1.36.12
PGC_VER   := v1.21.1
# staticcheck 2026.2.2, which knows Go 1.26.
STATICCHECK_VER := v0.8.2
LDFLAGS   := -s -w
export CGO_ENABLED ?= 0
# Every package: the product's module and the Go SDK's (its own module, sdk/go.mod; go.work
# puts both in one build).
PKGS      := ./... ./sdk/...

.PHONY: cover-check build run gen tools deps test test-templates test-short vet staticcheck race cover bench clean

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/cove ./cmd/cove

# Bring Cove up: installs runc and debootstrap, builds the base template on first run.
run: build
	-./scripts/criu.sh
	@if [ "$${COVE_RUNTIME:-runc}" = runsc ]; then ./scripts/runsc.sh; fi
	$(BIN)/cove server

tools:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VER)
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PGG_VER)
	GOBIN=$(BIN) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PGC_VER)

gen: tools
	rm -rf sdk/gen/process sdk/gen/filesystem
	PATH=$(BIN):$$PATH $(BIN)/buf generate

vet:
	$(GO) vet $(PKGS)

# Installs the pinned staticcheck into bin/ (once per version), then checks the whole tree.
staticcheck:
	@$(BIN)/staticcheck -version 2>/dev/null | grep -qF '($(STATICCHECK_VER:v%=%))' || \
		GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VER)
	$(BIN)/staticcheck $(PKGS)

# The race detector over the packages whose tests are fast enough under it (about two
# minutes here): everything but the whole-system suites (test/, sdk, cmd) and the runtime's
# runc tests. It needs cgo (gcc), unlike the build.
RACE_PKGS := ./internal/observe/collect/ ./internal/control/console/ ./internal/guest/envd/... ./internal/errdefs/ ./internal/observe/events/ ./internal/httpx/ \
	./internal/observe/logs/ ./internal/control/orchestrator/ ./internal/control/proxy/ ./internal/observe/redact/ ./internal/observe/sampler/ \
	./internal/control/server/ ./internal/store/... ./internal/control/api/... ./internal/observe/telemetry/... ./internal/builder/template/ \
	./internal/observe/trace/ ./sdk/reason/ ./sdk/requestid/
# The race detector's reports go to files and are printed again after the run, so that the
# end of a long log (all a CI summary keeps) holds them whole.
RACE_LOGS := $(or $(TMPDIR),/tmp)/cove-race-logs
race:
	rm -rf $(RACE_LOGS) && mkdir -p $(RACE_LOGS)
	CGO_ENABLED=1 GORACE="log_path=$(RACE_LOGS)/report" $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS) || \
		{ for f in $(RACE_LOGS)/report.*; do [ -f "$$f" ] && { echo "== race report $$f"; head -c 20000 "$$f"; }; done; exit 1; }

# The suite's tools and engines; the suite also runs its SDK scenarios on gVisor, so it builds
# the pinned runsc too (COVE_RUNSC=0 skips it, and those tests skip saying so).
deps:
	COVE_RUNSC=$${COVE_RUNSC:-1} ./scripts/deps.sh

# The shared template store of whole-system tests: the base template is built once per machine
# and definition (a few minutes), before the test packages run in parallel. It lives in a
# subdirectory named by `cove template base-key`, so a changed definition is built afresh.
TEST_TEMPLATES ?= /var/lib/cove-test-templates
export COVE_TEST_TEMPLATES := $(TEST_TEMPLATES)

test-templates: build
	@dir=$(TEST_TEMPLATES)/$$($(BIN)/cove template base-key); \
	if [ "$$(id -u)" = 0 ] && [ ! -f $$dir/base/meta.json ]; then \
		echo "==> building the test base template in $$dir"; \
		$(BIN)/cove template build base --data $$(mktemp -d) --templates $$dir; \
	fi

# The whole suite: go vet and staticcheck, then unit, envd, runtime (real runc sandboxes),
# whole-system tests against a real cove server, and the official e2b SDK, then the race
# detector over the fast packages. Tests that need root, runc or Node.js say so when they skip.
test: deps build vet staticcheck test-templates
	@mkdir -p $(BIN); bash -o pipefail -c '$(GO) test -count=1 -cover -timeout 25m $(PKGS) 2>&1 | tee $(BIN)/test.txt'
	@$(MAKE) --no-print-directory cover-check COVER_FROM=$(BIN)/test.txt
	$(MAKE) --no-print-directory race

# Coverage of the packages where the risk is (issue 10 item 6), per package; fails under
# COVER_MIN. The server's tests run cove server in-process with real runc sandboxes, so, like
# `make test`, they need root (without it they skip and its figure drops).
COVER_PKGS := ./internal/control/orchestrator/ ./internal/control/server/ ./internal/observe/trace/ ./internal/control/api/teamroutes/
COVER_MIN  := 70
cover: test-templates
	@mkdir -p $(BIN); $(GO) test -count=1 -cover $(COVER_PKGS) >$(BIN)/cover.txt 2>&1; s=$$?; cat $(BIN)/cover.txt; [ $$s = 0 ] || exit $$s
	@$(MAKE) --no-print-directory cover-check COVER_FROM=$(BIN)/cover.txt

# cover-check reads `go test -cover` output (COVER_FROM) and fails unless each of COVER_PKGS
# has a coverage figure of at least COVER_MIN %; `make test` runs it on the whole suite's.
cover-check:
	@awk -v min=$(COVER_MIN) -v pkgs="$(COVER_PKGS)" 'BEGIN { n = split(pkgs, want, " ") } \
		/coverage:/ { for (j = 1; j <= n; j++) { q = want[j]; sub("^[.]/", "", q); sub("/$$", "", q); \
			if ($$2 ~ ("/" q "$$")) for (i = 1; i < NF; i++) if ($$i == "coverage:") { p = $$(i+1); sub("%", "", p); seen[j] = 1; \
				printf "cover: %s %s%%\n", q, p; if (p + 0 < min) { print "cover: " q " is at " p "%, under " min "%"; bad = 1 } } } } \
		END { for (j = 1; j <= n; j++) if (!seen[j]) { print "cover: no coverage figure for " want[j]; bad = 1 }; exit bad }' $(COVER_FROM)

test-short:
	$(GO) test -short -count=1 $(PKGS)

bench: build
	$(GO) run ./bench/envd

clean:
	rm -rf $(BIN)

# The red team of issue 23 against a real server, once per engine of REDTEAM_RUNTIMES (runc,
# then gVisor's runsc, whose run skips saying so without bin/runsc): every attack class,
# tried/held per class (each engine's summary; its log in bin/redteam-<engine>.txt) and each
# run's seconds. RUN=TestDNS runs one class. Needs root; a minute or two per engine. CI runs
# it after make test (.ci/run).
REDTEAM_RUNTIMES ?= runc runsc
.PHONY: redteam
redteam: build test-templates
	@mkdir -p $(BIN); s=0; for e in $(REDTEAM_RUNTIMES); do t0=$$(date +%s); \
		COVE_RUNTIME=$$e COVE_REDTEAM=1 $(GO) test -count=1 -v -timeout 20m $(if $(RUN),-run '$(RUN)') ./test/redteam/ >$(BIN)/redteam-$$e.txt 2>&1 || s=1; \
		grep -E '^(--- FAIL|    --- FAIL|--- SKIP|panic)|did not hold' $(BIN)/redteam-$$e.txt; \
		sed -n '/^==> red team summary/,$$p' $(BIN)/redteam-$$e.txt; \
		echo "==> red team on $$e took $$(( $$(date +%s) - t0 )) s"; \
	done; exit $$s
