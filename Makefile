# Every target runs over every module of the workspace (go.work), each on its own:
# GOWORK=off, so a module builds only with what its own go.mod and go.sum say.
MODULES := $(shell env -u GOWORK go list -m -f '{{.Dir}}' | sed "s|^$(CURDIR)|.|")
export GOWORK := off
GOTEST ?= go test
TESTFLAGS ?= -count=1 -timeout 20m

.PHONY: all build vet test race deps services tidy bench bench-quick quickstart disruptive chaos

all: build vet test

## test: everything a change must pass: build, vet, every module's tests, then again under the race detector
test: deps build vet
	@set -e; for m in $(MODULES); do echo "== test $$m"; (cd $$m && $(GOTEST) $(TESTFLAGS) ./...); done
	@$(MAKE) --no-print-directory race
	@$(MAKE) --no-print-directory disruptive

build:
	@set -e; for m in $(MODULES); do echo "== build $$m"; (cd $$m && go build ./...); done

vet:
	@set -e; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && go vet ./...); done

race:
	@set -e; for m in $(MODULES); do echo "== race $$m"; (cd $$m && $(GOTEST) -race $(TESTFLAGS) ./...); done

## disruptive: tests that restart a database server; run alone, after the others
disruptive:
	@echo "== disruptive ./dbtest"; cd dbtest && OUTBOXER_DISRUPTIVE=1 $(GOTEST) $(TESTFLAGS) -run 'Restart' ./...

## deps: services up, npm packages (the SQS emulator), Go modules
deps: services
	@if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; fi
	@set -e; for m in $(MODULES); do (cd $$m && go mod download); done

services:
	@./scripts/services.sh

## tidy: go mod tidy in every module (each on its own, as a user would build it)
tidy:
	@set -e; for m in $(MODULES); do echo "== tidy $$m"; (cd $$m && GOWORK=off go mod tidy); done

quickstart:
	go run ./examples/quickstart

## bench: the full benchmark run (about 25-30 min, PostgreSQL on 127.0.0.1:5432); rewrites
## BENCHMARKS.md and bench/results.json. Not part of test.
bench: services
	cd bench && go run . $(BENCHFLAGS)

## bench-quick: every workload in about 3 min; writes bench/*-quick.* (ignored by git)
bench-quick: services
	cd bench && go run . -quick

## chaos: the reliability suite's long versions (OUTBOXER_CHAOS), the database restarts
## (OUTBOXER_DISRUPTIVE) and every fuzz target of the core for FUZZTIME each, then
## RELIABILITY.md rendered from the score rows they recorded. About 20-30 min.
## CHAOS_SCALE scales the long versions; the rows and logs go to CHAOS_DIR.
CHAOS_SCALE ?= 1
CHAOS_DIR ?= $(CURDIR)/bin/chaos
FUZZTIME ?= 30s
CHAOS_MODULES := ./dbtest ./sinks/kafka ./sinks/sqs ./sinks/watermill ./sinks/river
# Top-level tests to run, and (a second pass) the sinks' conformance suite's Poison case.
CHAOS_RUN ?= Chaos|Restart|^TestPoison$$
CHAOS_RUN_SUB ?= ^TestConformance$$/^Poison$$
chaos: deps
	@rm -rf $(CHAOS_DIR) && mkdir -p $(CHAOS_DIR)
	@status=0; \
	for m in $(CHAOS_MODULES); do \
		echo "== chaos $$m"; \
		log=$(CHAOS_DIR)/test-$$(basename $$m).log; \
		(cd $$m && rc=0 && for run in '$(CHAOS_RUN)' '$(CHAOS_RUN_SUB)'; do \
			OUTBOXER_CHAOS=$(CHAOS_SCALE) OUTBOXER_DISRUPTIVE=1 OUTBOXER_SCOREBOARD=$(CHAOS_DIR)/scores.jsonl \
			$(GOTEST) -count=1 -timeout 30m -v -run "$$run" ./... || rc=1; done > $$log 2>&1; exit $$rc) || status=1; \
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
