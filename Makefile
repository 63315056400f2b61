# helm-locker. `make test` runs every test on a fresh machine; `make help`
# lists the rest.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

# VERSION is a semantic version (hack/version.sh): the binary's, the image
# tag's and the chart's alike. SOURCE_DATE_EPOCH dates everything in the
# image, so two builds of one commit give one digest.
VERSION ?= $(shell bash hack/version.sh)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Release binaries are static, stripped and free of the builder's paths.
RELEASE_BUILD = CGO_ENABLED=0 go build -trimpath -ldflags '-s -w $(LDFLAGS)'

# REGISTRY (HOST[:PORT]/PATH) is where `make image` and `make chart` push;
# with none they write bin/oci and bin/chart only. PLAIN_HTTP=1 pushes over
# HTTP, for a registry on loopback.
REGISTRY ?=
PLAIN_HTTP ?=
PLATFORMS ?= linux/amd64 linux/arm64
# DIST_PLATFORMS are the CLI binaries a release publishes.
DIST_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

# Go packages with unit tests only; e2e needs the control plane.
# E2E_FLAGS passes extra flags to the e2e go test, e.g. E2E_FLAGS="-v -run Helm".
UNIT_PKGS = $(shell go list ./... | grep -v '/e2e')

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/helm-locker
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/helm-locker ./cmd/helm-locker

.PHONY: image
image: ## Build the linux/amd64+arm64 image without Docker: an OCI layout in bin/oci, or pushed as $(REGISTRY)/helm-locker:$(VERSION)
	for p in $(PLATFORMS); do GOOS=$${p%/*} GOARCH=$${p#*/} $(RELEASE_BUILD) -o bin/image/$${p/\//_}/helm-locker ./cmd/helm-locker; done
	go run ./hack/image --version $(VERSION) --revision $(COMMIT) --created $(SOURCE_DATE_EPOCH) \
	  $(foreach p,$(PLATFORMS),--binary $(p)=bin/image/$(subst /,_,$(p))/helm-locker) \
	  --sbom bin/image/sbom.spdx.json --digest-file bin/image/digest \
	  $(if $(REGISTRY),--push $(REGISTRY)/helm-locker:$(VERSION) $(if $(PLAIN_HTTP),--plain-http),--layout bin/oci)

.PHONY: chart
chart: ## Package the chart as bin/chart/helm-locker-$(VERSION).tgz; with REGISTRY, pulling $(REGISTRY)/helm-locker and pushed to oci://$(REGISTRY)/charts
	VERSION=$(VERSION) REGISTRY=$(REGISTRY) PLAIN_HTTP=$(PLAIN_HTTP) bash hack/chart.sh

.PHONY: dist
dist: ## Build the CLI for $(DIST_PLATFORMS) into bin/dist, with SHA256SUMS
	rm -rf bin/dist && mkdir -p bin/dist
	for p in $(DIST_PLATFORMS); do GOOS=$${p%/*} GOARCH=$${p#*/} $(RELEASE_BUILD) -o bin/dist/helm-locker_$(VERSION)_$${p%/*}_$${p#*/} ./cmd/helm-locker; done
	cd bin/dist && sha256sum helm-locker_* >SHA256SUMS

.PHONY: version
version: ## Print the version a build here is stamped with
	@echo $(VERSION)

.PHONY: tools
tools: ## Build (once) etcd, kube-apiserver, kubectl and the helm v3 and v4 CLIs
	@bash hack/tools.sh

.PHONY: test
test: test-unit test-e2e ## Run every test: unit and e2e, then check that none leaked a process

.PHONY: test-unit
test-unit: ## Run the unit tests with the race detector (fetches promtool once: hack/promtool.sh)
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	HELM_LOCKER_PROMTOOL=$$(bash hack/promtool.sh) go test -race -count=1 $(UNIT_PKGS)

.PHONY: test-e2e
test-e2e: ## Run the e2e suite against a real control plane and real helm CLIs
	bin=$$(bash hack/tools.sh); export HELM_LOCKER_TOOLS_BIN=$$bin; status=0; \
	go test -count=1 -timeout 45m -parallel 6 $(E2E_FLAGS) ./e2e/... || status=$$?; \
	bash hack/check-leaks.sh; \
	exit $$status

# FLAKE_RUNS is how many times `make flake` runs the e2e suite.
FLAKE_RUNS ?= 5

.PHONY: flake
flake: ## Run the e2e suite FLAKE_RUNS times in a row (default 5) and count each test that failed
	@bash hack/flake.sh $(FLAKE_RUNS) $(E2E_FLAGS)

.PHONY: cluster
cluster: ## Start the local control plane in the background and print its kubeconfig
	@bash hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local control plane
	@bash hack/cluster.sh down

.PHONY: demo
demo: ## Lock a real chart on a local control plane and watch an edit being reverted
	@bash hack/demo.sh

.PHONY: crd
crd: ## Copy the CRDs the operator installs to deploy/chart/helm-locker/crds
	cp api/helm.cattle.io_helmreleases.yaml api/helm-locker.io_manifestlocks.yaml deploy/chart/helm-locker/crds/

.PHONY: api-reference
api-reference: ## Write docs/api-reference.md from the Go types under api/ (crd-ref-docs, pinned in hack/api-reference/tools.mod)
	go test ./api -run '^TestAPIReference$$' -update

# SERIES is the scale series of `make bench`: locked objects per row, each
# with as many untracked (about 100 minutes for the three rows here; the
# 25,000 row alone took 20 on 2 cores).
SERIES ?= 25000,50000,100000

.PHONY: bench
bench: build ## Measure cold lock, revert latency against the floor, memory, idle load, churn and the scale series; writes docs/benchmarks.*
	go test -run '^$$' -bench . -benchmem -count 5 ./manifest/ ./internal/storage/ ./engine/ ./informers/ ./internal/render/ ./internal/sandbox/ ./internal/controller/ ./internal/overlay/ | tee docs/go-benchmarks.txt
	HELM_LOCKER_TOOLS_BIN=$$(bash hack/tools.sh) go run ./e2e/cmd/bench -series $(SERIES) $(BENCH_FLAGS)
