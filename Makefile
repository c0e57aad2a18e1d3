# hap-operator — one entry point for people and CI.
#   make demo   local control plane with the real Gardener API + CRDs + sample bindings + operator, then `kubectl get hap -A`
#   make test   everything CI runs: fmt, clippy, unit, property, CLI, e2e (real control plane, gardener-apiserver, a separate garden,
#               and the image as pods on a real node), fuzz smoke
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

export CARGO_TARGET_DIR ?= $(HOME)/.cache/hap-operator/target
export CARGO_TERM_COLOR ?= never
ROOT := $(CURDIR)
KUBECONFIG_TESTENV := $(ROOT)/.testenv/kubeconfig
HAP := $(CARGO_TARGET_DIR)/debug/hap

.PHONY: help
help:
	@echo "make demo        run the operator on a local control plane (real Gardener API) with sample pools, show 'kubectl get hap -A'"
	@echo "make demo-down   stop the demo operator and the control plane"
	@echo "make test        every test (fmt, clippy, unit, property, CLI, e2e, fuzz smoke)"
	@echo "make image       the container image (static musl binary, FROM scratch) as an OCI archive, with buildah"
	@echo "make release     the release into dist/, reproducibly: chart package, CRDs, image archive and digest, kustomize bundle, SHA256SUMS"
	@echo "make crds        regenerate crds/ from the Rust types (and their copies under deploy/)"
	@echo "make go-types    regenerate the Go types of clients/go from crds/accountpool.io.yaml"
	@echo "make monitoring  copy the PrometheusRule and the Grafana dashboard into the Helm chart"
	@echo "make testenv-up / testenv-down   the local control plane alone (with gardener-apiserver)"
	@echo "make node-up / node-down         a control plane with a real node (kubelet, containerd), the image loaded"
	@echo "make chaos       full chaos test: 1000 claims, leader kills, apiserver restarts (own control plane)"
	@echo "make bench       microbenchmarks and the load benchmark (own control plane); see BENCHMARKS.md"

.PHONY: monitoring
# The Helm chart ships byte-identical copies of the PrometheusRule and the Grafana dashboard of the
# kustomize components (tests/it/alerts.rs fails when they differ).
monitoring:
	cp deploy/kustomize/components/prometheus-rules/prometheusrule.yaml deploy/helm/hap-operator/files/prometheusrule.yaml
	cp deploy/kustomize/components/grafana-dashboard/hap-operator.json deploy/helm/hap-operator/files/hap-operator.json

.PHONY: tools
tools:
	@scripts/ensure-tools.sh

.PHONY: image
image: tools
	scripts/image.sh

.PHONY: release
# Reproducible: the same commit gives byte-identical files (tests/it/e2e_dist.rs checks it).
release: tools
	scripts/release.sh

.PHONY: build
build: tools
	cargo build --bins

.PHONY: crds
crds: build
	$(HAP) crd > crds/accountpool.io.yaml
	cp crds/accountpool.io.yaml deploy/kustomize/base/crds/accountpool.io.yaml
	cp crds/accountpool.io.yaml deploy/helm/hap-operator/crds/accountpool.io.yaml

.PHONY: go-types
# The Go client's types follow crds/accountpool.io.yaml (after `make crds`); a Go test fails when
# they drift (clients/go/apis/v1alpha1/drift_test.go, run by tests/it/e2e_go_client.rs).
go-types:
	cd clients/go && GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off \
	  GOMODCACHE=$${GOMODCACHE:-$(HOME)/.cache/hap-operator/gomod} GOCACHE=$${GOCACHE:-$(HOME)/.cache/hap-operator/gobuild} \
	  go run ./cmd/hap-gen-types -crds ../../crds/accountpool.io.yaml -out apis/v1alpha1/zz_generated.types.go

.PHONY: testenv-up testenv-down
testenv-up: tools
	e2e/testenv up
testenv-down:
	e2e/testenv down

.PHONY: node-up node-down
node-up: tools
	scripts/ensure-node-tools.sh
	e2e/testenv up --node --images "$$(scripts/image.sh),$$(scripts/testhelper-image.sh)"
node-down:
	e2e/testenv down --node

.PHONY: lint
lint: tools
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	# The core alone, with only the features it asks for: a client call there does not compile.
	cargo clippy -p hap-core --all-targets --locked -- -D warnings
	scripts/core-deps.sh
	cd e2e/tools && test -z "$$(gofmt -l .)" || { echo "gofmt: run 'gofmt -w e2e/tools'"; gofmt -l .; exit 1; }
	cd e2e/testhelper && test -z "$$(gofmt -l .)" || { echo "gofmt: run 'gofmt -w e2e/testhelper'"; gofmt -l .; exit 1; }
	cd e2e/cert-manager && test -z "$$(gofmt -l .)" || { echo "gofmt: run 'gofmt -w e2e/cert-manager'"; gofmt -l .; exit 1; }
	cd clients/go && test -z "$$(gofmt -l .)" || { echo "gofmt: run 'gofmt -w clients/go'"; gofmt -l .; exit 1; }

.PHONY: test
test: tools
	scripts/test.sh

.PHONY: chaos
chaos: tools
	scripts/chaos.sh

.PHONY: bench
bench: tools
	scripts/bench.sh

.PHONY: demo
demo: build
	scripts/demo.sh

.PHONY: demo-down
demo-down:
	-scripts/demo.sh down
	e2e/testenv down
