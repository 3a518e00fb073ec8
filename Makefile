# Switchyard build, test and benchmark entry points.
#
#   make test    install what is missing (Debian packages, kube-apiserver and
#                etcd built once into a cache outside the checkout, lint), then
#                lint and run every test, unit and end-to-end.
#   make bench   Go benchmarks plus every scripted benchmark under test/bench/.
#   make run     the quickstart: the controller on deploy/quickstart/.
#   make build   the controller binary as the image has it: _out/switchyard.

SHELL := /bin/bash
GO ?= go
GOLANGCI_LINT_VERSION := v2.15.0
TOOLS_DIR := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/switchyard/tools
GOLANGCI_LINT := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# Parallel test binaries on a 2-core machine: two is what fits.
TEST_FLAGS ?= -count=1 -p 2 -timeout 30m

.PHONY: test setup lint vet unit bench run build image

test: setup lint
	# Every package builds for arm64 nodes too (the L4 loops' raw system
	# calls differ by architecture).
	GOARCH=arm64 $(GO) build ./...
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) test -race -count=1 -timeout 20m ./balancer/... ./proxy/ ./proxy/h2srv/ ./tcpproxy/
	# The proxy's suite again with its HTTP/2 clients on x/net/http2's
	# server (--http2-server=x/net).
	SWITCHYARD_TEST_XNET_HTTP2=1 $(GO) test -count=1 ./proxy/

setup:
	./test/setup.sh

vet:
	$(GO) vet ./...

$(GOLANGCI_LINT):
	mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS_DIR)/golangci-lint $@

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

unit:
	$(GO) test -short $(TEST_FLAGS) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	@for s in test/bench/*.sh; do [ -e "$$s" ] || continue; echo "== $$s"; "$$s" || exit 1; done

run:
	$(GO) run $(GO_OVERLAY) ./cmd/switchyard quickstart

# The controller binary as the image has it, in _out/switchyard.
build:
	CGO_ENABLED=0 $(GO) build -trimpath $(GO_OVERLAY) -o _out/switchyard ./cmd/switchyard

# The release build's changes to the Go runtime (deploy/goruntime/overlay.sh:
# the network poller runs ready connections in the order they came, and an
# idle P keeps looking for work a while before it sleeps); empty
# when the installed Go's runtime takes neither change.
GO_OVERLAY = $(addprefix -overlay=,$(shell GO=$(GO) ./deploy/goruntime/overlay.sh _out/goruntime))

# The controller image as an OCI layout and an oci-archive under _out/image
# (IMAGE_OUT), tagged IMAGE_VERSION (default: git describe), without a
# container engine: needs root, mmdebstrap and umoci (docs/image.md).
image:
	./deploy/image/build.sh $(or $(IMAGE_OUT),_out/image) $(IMAGE_VERSION)
