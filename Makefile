# cninet — see README.md. Every target installs what it needs first.
GO        ?= go
FUZZTIME  ?= 300000x
THICK_FUZZTIME ?= 20000x
SOAK_N    ?= 1000
SOAK_C    ?= 8

.PHONY: all deps test unit fuzz lint demo soak bench install

all: test

# System packages (iptables, iproute2, Debian's CNI plugins) and the
# upstream plugins, built into .cache/cni/.
deps:
	@bash scripts/install-deps.sh

# staticcheck (installed into .cache/bin by scripts/install-deps.sh) runs
# every default check on every package. STATICCHECK_HELD_PKGS and
# STATICCHECK_HELD_CHECKS can hold checks back in some packages while
# their findings are being fixed; none are held now.
STATICCHECK            ?= .cache/bin/staticcheck
STATICCHECK_HELD_PKGS  ?=
STATICCHECK_HELD_CHECKS ?= -SA1019,-ST1005,-U1000

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd examples/prometheus && $(GO) build -o /dev/null ./... && $(GO) vet ./...
	@GO="$(GO)" bash scripts/install-deps.sh staticcheck
	@held=$$(if [ -n "$(STATICCHECK_HELD_PKGS)" ]; then $(GO) list $(STATICCHECK_HELD_PKGS); fi); \
	  rest=$$($(GO) list ./... | grep -vxF "$$held"); \
	  echo "staticcheck ./..."; \
	  [ -z "$$held" ] || echo "  with $(STATICCHECK_HELD_CHECKS) held back in $(STATICCHECK_HELD_PKGS)"; \
	  $(STATICCHECK) $$rest && \
	  { [ -z "$$held" ] || $(STATICCHECK) -checks "inherit,$(STATICCHECK_HELD_CHECKS)" $$held; }
	cd examples/prometheus && $(abspath $(STATICCHECK)) ./...

# Unit tests, every package but integration/, with the host-safety check:
# they run in a private mount and network namespace where /var/lib/cni,
# /run/cni and /run/netns are tmpfs holding planted cache entries,
# reservations and a netns, next to planted iptables and nftables rules;
# any change to those fails the run (scripts/unit-sandboxed.sh). Then the
# integration suite, which makes namespaces of its own.
unit:
	GO="$(GO)" bash scripts/unit-sandboxed.sh -timeout 45m
	$(GO) test -race -count=1 -timeout 70m ./integration/

# FUZZTIME is a count of inputs: with a duration, Go 1.26's fuzz coordinator
# can fail a clean run at the deadline (golang/go#75804).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRule$$' -fuzztime $(FUZZTIME) ./internal/footprint
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(THICK_FUZZTIME) ./internal/thick
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(THICK_FUZZTIME) ./cmd/cninet-shim
	$(GO) test -run '^$$' -fuzz '^FuzzReadConfig$$' -fuzztime $(THICK_FUZZTIME) ./cmd/cninet-shim

# Unit tests (sandboxed and checked, see unit), then the integration suite
# (in its own network and mount namespace, against every plugin set), then
# a short fuzz run.
test: deps lint unit fuzz

demo: deps
	$(GO) run ./cmd/cninet demo

# SOAK_N Setup/Teardown cycles at concurrency SOAK_C per plugin set, then a
# leak audit (make test runs a short one: 200 cycles).
soak: deps
	SOAK_N=$(SOAK_N) SOAK_C=$(SOAK_C) $(GO) test -count=1 -timeout 120m -run '^TestSoak$$' -v ./integration/

# Side-by-side benchmarks with the real plugins (as root): Debian's and the
# upstream v1.9.1 plugins (iptables and nftables backends), every scenario;
# writes BENCHMARKS.md, bench/results.svg and bench/results.json (raw
# results). BENCH_ARGS adds flags, e.g. -only overhead-scale,gc-nft to rerun
# some scenarios and keep the others' results, or -gc-n 200.
bench: deps
	@mkdir -p .cache/bench-plugins
	$(GO) build -o .cache/bench-plugins/failonce ./testdata/plugins/failonce
	$(GO) test -run '^$$' -bench . -benchmem -count 1 . ./internal/telemetry | tee .cache/gobench.txt
	cd bench && $(GO) run . -plugins /usr/lib/cni -upstream ../.cache/cni/v1.9.1 -failonce ../.cache/bench-plugins \
		-gobench ../.cache/gobench.txt -out ../BENCHMARKS.md -svg results.svg -state results.json $(BENCH_ARGS)

# Installs thick mode: cninet into $(BINDIR), the cninet-shim plugin into
# the CNI plugin dir with a link to cninet beside it (the shim runs its
# DEL with it when the daemon gives none an answer), the systemd units (contrib/systemd, ExecStart
# pointing at $(BINDIR)) into $(SYSTEMD_UNIT_DIR), and makes the daemon's
# conf dir. DESTDIR stages it all under another root (packaging; the
# tests install into a temp dir). Then: systemctl daemon-reload &&
# systemctl enable --now cninet.socket cninet.service.
PREFIX           ?= /usr/local
BINDIR           ?= $(PREFIX)/bin
CNI_BIN_DIR      ?= /opt/cni/bin
SYSTEMD_UNIT_DIR ?= /etc/systemd/system
CNINET_CONF_DIR  ?= /etc/cninet/net.d

install:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  $(GO) build -o "$$tmp/cninet" ./cmd/cninet; \
	  $(GO) build -o "$$tmp/cninet-shim" ./cmd/cninet-shim; \
	  install -D -m 0755 "$$tmp/cninet" "$(DESTDIR)$(BINDIR)/cninet"; \
	  install -D -m 0755 "$$tmp/cninet-shim" "$(DESTDIR)$(CNI_BIN_DIR)/cninet-shim"; \
	  ln -sfn "$(BINDIR)/cninet" "$(DESTDIR)$(CNI_BIN_DIR)/cninet"; \
	  install -d -m 0755 "$(DESTDIR)$(SYSTEMD_UNIT_DIR)" "$(DESTDIR)$(CNINET_CONF_DIR)"; \
	  sed 's|/usr/local/bin/cninet|$(BINDIR)/cninet|; s|--conf-dir /etc/cninet/net.d|--conf-dir $(CNINET_CONF_DIR)|; s|--cni-path /opt/cni/bin|--cni-path $(CNI_BIN_DIR)|' \
	    contrib/systemd/cninet.service > "$$tmp/cninet.service"; \
	  install -m 0644 "$$tmp/cninet.service" "$(DESTDIR)$(SYSTEMD_UNIT_DIR)/cninet.service"; \
	  install -m 0644 contrib/systemd/cninet.socket "$(DESTDIR)$(SYSTEMD_UNIT_DIR)/cninet.socket"; \
	  echo "installed cninet into $(DESTDIR)$(BINDIR), cninet-shim (and a link to cninet, which runs its DEL when the daemon gives none an answer) into $(DESTDIR)$(CNI_BIN_DIR), units into $(DESTDIR)$(SYSTEMD_UNIT_DIR)"
