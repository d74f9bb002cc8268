# Cove's build. `make gen` regenerates the committed protobuf/Connect code with pinned tools.
GO        ?= go
BIN       := $(CURDIR)/bin
BUF_VER   := v1.50.0
PGG_VER   := v1.36.12
PGC_VER   := v1.21.1
LDFLAGS   := -s -w
export CGO_ENABLED ?= 0

.PHONY: build run gen tools deps test test-templates test-short vet bench clean

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/cove ./cmd/cove

# Bring Cove up: installs runc and debootstrap, builds the base template on first run.
run: build
	-./scripts/criu.sh
	$(BIN)/cove server

tools:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VER)
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PGG_VER)
	GOBIN=$(BIN) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PGC_VER)

gen: tools
	rm -rf gen/process gen/filesystem
	PATH=$(BIN):$$PATH $(BIN)/buf generate

vet:
	$(GO) vet ./...

deps:
	./scripts/deps.sh

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

# The whole suite: unit, envd, runtime (real runc sandboxes), whole-system tests against a real
# cove server, and the official e2b SDK. Tests that need root, runc or Node.js say so when they skip.
test: deps build vet test-templates
	$(GO) test -count=1 -timeout 25m ./...

test-short:
	$(GO) test -short -count=1 ./...

bench: build
	$(GO) run ./bench/envd

clean:
	rm -rf $(BIN)
