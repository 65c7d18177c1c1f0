# GaaS. `make help` lists the targets; `make test` is exactly what CI runs.

# go-nvml's cgo prints deprecation warnings for NVML calls we never make.
export CGO_CFLAGS := -Wno-deprecated-declarations
GO ?= go

.PHONY: help deps build demo test bench fuzz generate clean

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

deps: ## install bubblewrap and python3 where missing (root), or say how
	@scripts/deps.sh

build: ## build bin/gaas
	$(GO) build -o bin/gaas ./cmd/gaas

demo: deps build ## run a local testnet and a real training job end to end
	bin/gaas demo

test: deps ## vet and run every test, with the race detector
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

bench: deps ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz: ## fuzz each decoder of user or network input for 30 s
	$(GO) test -run '^$$' -fuzz FuzzInspectCSV -fuzztime 30s ./inputs
	$(GO) test -run '^$$' -fuzz FuzzCheckPackage -fuzztime 30s ./inputs
	$(GO) test -run '^$$' -fuzz FuzzScannerAgreesWithEncodingCSV -fuzztime 30s ./inputs
	$(GO) test -run '^$$' -fuzz FuzzCheckScript -fuzztime 30s ./inputs
	$(GO) test -run '^$$' -fuzz FuzzUnmarshal -fuzztime 30s ./protocol
	$(GO) test -run '^$$' -fuzz FuzzConnReceive -fuzztime 30s ./protocol
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./money

generate: ## rewrite api/openapi.json from the API's route table and types
	cd api && $(GO) generate .

clean: ## remove build output and the default testnet folder
	rm -rf bin .testnet
