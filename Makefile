# softverbs: build, test, benchmark, fuzz, lint.
GO ?= go
PKGS := ./...
# A count, not a duration: with a duration, Go before 1.27 can fail a fuzz
# run with "context deadline exceeded" as the time runs out, with no
# failing input (go.dev/issue/75804). 20000 inputs take 3-10 s per target.
FUZZTIME ?= 20000x
SIM_SEEDS ?= 300

.PHONY: all build deps libs test race bench fuzz lint demo interop interop-quick perftest-table pgo

all: lint build test

build:
	$(GO) build $(PKGS)

# The host tools the tests use (iproute2, tshark): installed when missing and
# root, reported otherwise (the root-only tests then skip with a reason).
deps:
	@bash scripts/deps.sh

# The drop-in C libraries over rvtd (rvtd/libibverbs, rvtd/librdmacm, issue 20) into
# build/lib, with their C test programs in build/test. Needs gcc and the
# rdma-core headers (deps installs them as root); without them it says so
# and builds nothing (rvtd/dropin's tests then skip, or fail as root).
libs:
	@if command -v $${CC:-gcc} >/dev/null 2>&1 && [ -f /usr/include/infiniband/verbs.h ]; then \
	  $(MAKE) --no-print-directory -C rvtd/libibverbs OUT=$(CURDIR)/build && \
	  if [ -f /usr/include/rdma/rdma_cma.h ]; then \
	    $(MAKE) --no-print-directory -C rvtd/librdmacm OUT=$(CURDIR)/build; \
	  else echo "libs: librdmacm-dev missing (make deps as root); librdmacm not built"; fi; \
	else echo "libs: gcc or libibverbs-dev missing (make deps as root); not built"; fi

# The README's test command; .ci/run calls exactly this. It installs what its
# tests need first, so it works by itself on a fresh machine.
test: deps lint libs
	SIM_SEEDS=$(SIM_SEEDS) $(GO) test -count=1 -timeout 12m $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

bench:
	$(GO) test -run XXX -bench . -benchmem -count 5 $(PKGS)

# A short run of every fuzz target (go test -fuzz takes one target at a time).
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

demo:
	$(GO) run ./cmd/rvt demo

# rvt pingpong against Linux rxe and rdma-core's ibv_{rc,uc,ud}_pingpong in
# the ../shared/rxe-peer guests, both roles, over TAP (root; boots a guest);
# then rvt rping, ucmatose and udaddy against rdma-core's (the CM); then
# rvt's perftest tools against Debian's perftest 4.5.
interop:
	GO=$(GO) scripts/interop.sh
	GO=$(GO) scripts/interop-cm.sh
	GO=$(GO) scripts/interop-perftest.sh
	GO=$(GO) scripts/interop-rvtd.sh

# The short subset .ci/run runs: RC pingpong, rping, ib_write_bw and
# ib_send_lat in each role over TAP; RC pingpong through rvtd in each role
# and Debian's ibv_rc_pingpong on our libibverbs.
interop-quick:
	GO=$(GO) scripts/interop.sh --quick
	GO=$(GO) scripts/interop-cm.sh --quick
	GO=$(GO) scripts/interop-perftest.sh --quick
	GO=$(GO) scripts/interop-rvtd.sh --quick

# The CPU profiles the rvt and rvtd commands are built with (Go's
# profile-guided optimization: cmd/rvt/default.pgo, cmd/rvtd/default.pgo),
# from the benchmarks and rvtd's measurements (about a minute and a half).
# Rerun after changing a hot path; docs/performance.md, "Profile-guided
# builds".
pgo:
	GO=$(GO) scripts/pgo.sh

# The perftest tools on the in-memory pair beside their same-run baselines:
# rewrites the table in docs/performance.md and the plots under
# docs/perftest/ (about 10 s on 2 cores), and the README's -a plot.
perftest-table:
	$(GO) run ./cmd/perftest-table -doc docs/performance.md -plots docs/perftest
	$(GO) run ./cmd/rvt ib_write_bw -a -n 200 --plot docs/perftest/ib_write_bw_all.png >/dev/null
