# Every target runs over every module of the workspace (go.work), in workspace mode: the
# released modules (versions.yaml) require one another at the release version, and go.work
# builds each from its directory. `make modules` checks that each module's own go.mod and
# go.sum are tidy and sufficient, as a user builds it, and plays a new user (go get,
# go install from a tagged copy); see tools/modules.
MODULES := $(shell sed -n 's/^[[:space:]]*\(\.[^[:space:]]*\)$$/\1/p' go.work)
export GOWORK := $(CURDIR)/go.work
# Before the release version is tagged, no proxy has it: a file proxy under bin/ serves a
# fixed go.mod for each released module at that version (tools/modules devproxy).
DEVPROXY := $(CURDIR)/bin/devproxy
export GOPROXY := file://$(DEVPROXY),$(shell env -u GOPROXY go env GOPROXY)
export GONOSUMDB := github.com/outboxer-go/outboxer
# The tools module needs only the standard library; it runs outside the workspace.
MODTOOL := cd tools && GOWORK=off go run ./modules
GOTEST ?= go test
TESTFLAGS ?= -count=1 -timeout 40m
# The next Go release, on which CI also builds, vets and runs the root module's and the SQLite tests.
GO_NEXT ?= go1.27.3

.PHONY: all build vet test ci race deps services tidy bench bench-quick quickstart disruptive chaos \
	devproxy modules release go-next

all: build vet test

## test: every test of every module, after vet (which type-checks every package) and the
## module checks
test: deps vet modules
	@set -e; for m in $(MODULES); do echo "== test $$m"; (cd $$m && $(GOTEST) $(TESTFLAGS) ./...); done

## ci: what CI runs (.ci/run): every module built, test, then the next Go release, the race
## detector, and the tests that restart a database server
ci: deps build test
	@$(MAKE) --no-print-directory go-next
	@$(MAKE) --no-print-directory race
	@$(MAKE) --no-print-directory disruptive

build: devproxy
	@set -e; for m in $(MODULES); do echo "== build $$m"; (cd $$m && go build -o /dev/null ./...); done

vet: devproxy
	@set -e; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && go vet ./...); done

race: devproxy
	@set -e; for m in $(MODULES); do echo "== race $$m"; (cd $$m && $(GOTEST) -race $(TESTFLAGS) ./...); done

## disruptive: tests that restart a database server; run alone, after the others
disruptive: devproxy
	@echo "== disruptive ./dbtest"; cd dbtest && OUTBOXER_DISRUPTIVE=1 $(GOTEST) $(TESTFLAGS) -run 'Restart' ./...

## deps: services up, npm packages (the SQS emulator), Go modules
deps: services devproxy
	@./scripts/chromium.sh
	@if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; fi
	@set -e; for m in $(MODULES); do (cd $$m && go mod download); done

services:
	@./scripts/services.sh

devproxy:
	@$(MODTOOL) devproxy $(DEVPROXY)

## tidy: go mod tidy in every module (each on its own, as a user builds it, through a tagged copy)
tidy:
	@$(MODTOOL) tidy

## modules: no replace, one version for the released set, every module tidy; then the consumer
## check: the README's go get / go install lines from a fresh module, against a tagged copy
modules:
	@$(MODTOOL) check
	@$(MODTOOL) consumer

## release: make release VERSION=vX.Y.Z rewrites every requirement between released modules to
## VERSION, tidies every module and prints the tags to push, in dependency order. Pushes nothing.
release:
	@test -n "$(VERSION)" || (echo "usage: make release VERSION=vX.Y.Z" && exit 2)
	@$(MODTOOL) release $(VERSION)

## go-next: build and vet every module on $(GO_NEXT), and run the root module's and the SQLite tests
go-next: devproxy
	@set -e; for m in $(MODULES); do echo "== $(GO_NEXT) build+vet $$m"; (cd $$m && GOTOOLCHAIN=$(GO_NEXT) go build -o /dev/null ./... && GOTOOLCHAIN=$(GO_NEXT) go vet ./...); done
	@echo "== $(GO_NEXT) test ."; GOTOOLCHAIN=$(GO_NEXT) $(GOTEST) $(TESTFLAGS) ./...
	@echo "== $(GO_NEXT) test ./dbtest (SQLite)"; cd dbtest && GOTOOLCHAIN=$(GO_NEXT) $(GOTEST) $(TESTFLAGS) -run '/^sqlite$$' ./...

## quickstart: the README's first command; through make, so the unreleased sibling modules
## resolve (devproxy) on a machine whose module cache has never seen them
quickstart: devproxy
	go run ./examples/quickstart

## bench: the full benchmark run (about 25-30 min, PostgreSQL on 127.0.0.1:5432); rewrites
## BENCHMARKS.md and bench/results.json. Not part of test.
bench: services devproxy
	cd bench && go run . $(BENCHFLAGS)

## bench-quick: every workload in about 3 min; writes bench/*-quick.* (ignored by git)
bench-quick: services devproxy
	cd bench && go run . -quick

## chaos: the reliability suite's long versions (OUTBOXER_CHAOS), the database restarts
## (OUTBOXER_DISRUPTIVE) and every fuzz target of the core for FUZZTIME each, then
## RELIABILITY.md rendered from the score rows they recorded. About 20-30 min.
## CHAOS_SCALE scales the long versions; the rows and logs go to CHAOS_DIR.
CHAOS_SCALE ?= 1
CHAOS_DIR ?= $(CURDIR)/bin/chaos
FUZZTIME ?= 30s
CHAOS_MODULES := ./dbtest ./sinks/kafka/test ./sinks/sqs/test ./sinks/watermill/test ./sinks/river/test
# Top-level tests to run, and (a second pass) the sinks' conformance suite's Poison case.
CHAOS_RUN ?= Chaos|Restart|^TestPoison$$
CHAOS_RUN_SUB ?= ^TestConformance$$/^Poison$$
chaos: deps
	@rm -rf $(CHAOS_DIR) && mkdir -p $(CHAOS_DIR)
	@status=0; \
	for m in $(CHAOS_MODULES); do \
		echo "== chaos $$m"; \
		log=$(CHAOS_DIR)/test-$$(echo $${m#./} | tr / -).log; \
		(cd $$m && rc=0 && for run in '$(CHAOS_RUN)' '$(CHAOS_RUN_SUB)'; do \
			OUTBOXER_CHAOS=$(CHAOS_SCALE) OUTBOXER_DISRUPTIVE=1 OUTBOXER_SCOREBOARD=$(CHAOS_DIR)/scores.jsonl \
			$(GOTEST) -count=1 -timeout 120m -v -run "$$run" ./... || rc=1; done > $$log 2>&1; exit $$rc) || status=1; \
		grep -E '^(--- FAIL|FAIL|ok|panic)|score: ' $$log; \
	done; \
	for f in $$(go test -list '^Fuzz' ./core | grep '^Fuzz'); do \
		echo "== fuzz $$f ($(FUZZTIME))"; \
		if go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./core > $(CHAOS_DIR)/fuzz-$$f.log 2>&1; then \
			echo "$$f pass $(FUZZTIME) $$(grep -o 'execs: [0-9]*' $(CHAOS_DIR)/fuzz-$$f.log | tail -1)" >> $(CHAOS_DIR)/fuzz.txt; \
		else \
			echo "$$f FAIL $(FUZZTIME) (see the failing input under core/testdata/fuzz/$$f)" >> $(CHAOS_DIR)/fuzz.txt; status=1; \
		fi; \
	done; \
	touch $(CHAOS_DIR)/scores.jsonl; \
	(cd dbtest && go run ./cmd/scoreboard -scores $(CHAOS_DIR)/scores.jsonl -fuzz $(CHAOS_DIR)/fuzz.txt \
		-command "make chaos" -out $(CURDIR)/RELIABILITY.md) || status=1; \
	echo "== RELIABILITY.md written from $(CHAOS_DIR)/scores.jsonl"; \
	exit $$status
