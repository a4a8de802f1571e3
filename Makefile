# kvfs: `make run` mounts a cache with defaults, `make test` runs the suite.
GO      ?= go
BIN     := bin/kvfs
MNT     ?= /tmp/kvfs
FUZZTIME ?= 50000x
CORE_FUZZTIME ?= 400x
export KVFS_BIN := $(abspath $(BIN))
# Every suite runs with -json through testsummary, which prints each
# package's result and the output of what failed, then "N passed, N
# failed, N skipped" and each skip's reason, and fails the target if a
# test failed; `make test` ends with the total over all suites.
TESTSUM := bin/testsummary
RESULTS := bin/test-results

.PHONY: all build run test unit third-party third-party-check fuse integration fuzz bench kit vet clean install s3server testsummary

all: build

build:
	$(GO) build -o $(BIN) ./cmd/kvfs

# Mounts at $(MNT) with the store beside it ($(MNT).kvfs-store) and a
# capacity of 90% of that disk's free space; Ctrl-C unmounts.
run: build
	@# Fails on the dead mount a crash left (ENOTCONN), which the mount
	@# below replaces; a real problem is the mount's to name.
	@mkdir -p $(MNT) 2>/dev/null || true
	$(strip $(BIN) mount $(ARGS) $(MNT))

# vet also fails on any of kvfs's Go files (not third_party's) that
# gofmt would change, and vets for arm64 too: inference nodes are arm64
# as well (GH200), and unix.Stat_t's field types differ there (blob did
# not build for it until 2026-12-07).
vet:
	$(GO) vet ./...
	GOARCH=arm64 $(GO) vet ./...
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(find . -name '*.go' -not -path './third_party/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi

# The whole suite: the core under the race detector (and the lock-order
# checker, -tags lockcheck: internal/lockorder) and a short fuzz run,
# in-process mounts, then the built binary mounted for real.
test: build vet unit third-party fuzz fuse integration
	@echo "== make test: every suite =="
	@$(TESTSUM) -total $(RESULTS)/unit.json $(RESULTS)/third-party.json $(RESULTS)/fuse.json $(RESULTS)/integration.json

testsummary:
	$(GO) build -o $(TESTSUM) ./internal/testsummary
	mkdir -p $(RESULTS)

unit: testsummary
	$(GO) test -json -race -tags lockcheck -count=1 ./ledger/ ./blob/ ./core/ ./ramcache/ ./mount/ ./internal/... ./cmd/... ./gpudirect/ ./remote/ | $(TESTSUM) -save $(RESULTS)/unit.json

# The patched go-fuse package's tests of what kvfs patched (INIT) and of
# its request parsing: a nested module, which ./... does not reach. The
# package's mount tests need libfuse 2's /bin/fusermount, which kvfs
# does not use and these machines lack.
third-party: testsummary
	cd third_party/go-fuse && $(GO) test -json -count=1 -run 'RequestTimeout|ProtocolServer|Adopt|ResendNotify|Outstanding|NewMountedServer' ./fuse/ | ../../$(TESTSUM) -save ../../$(RESULTS)/third-party.json

# third_party/go-fuse is the base go.mod names plus the patches, nothing
# else (see third_party/README.md).
third-party-check:
	third_party/check.sh

# A count, not a duration: with a duration, go1.26's fuzz coordinator can
# report its own deadline as a failure (golang/go#75804).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLedger -fuzztime $(FUZZTIME) -timeout 10m ./ledger/
	$(GO) test -run '^$$' -fuzz FuzzCore -fuzztime $(CORE_FUZZTIME) -timeout 10m ./core/
	$(GO) test -run '^$$' -fuzz FuzzCheckpointEqualsWalk -fuzztime $(CORE_FUZZTIME) -timeout 10m ./blob/

fuse: testsummary
	$(GO) test -json -race -tags lockcheck -count=1 -timeout 15m ./fusefs/ | $(TESTSUM) -save $(RESULTS)/fuse.json

integration: build testsummary
	$(GO) test -json -count=1 -parallel 8 -timeout 30m ./tests/ | $(TESTSUM) -save $(RESULTS)/integration.json

bench: build
	$(GO) run ./cmd/kvfs-bench $(ARGS)

# The bench for a machine without Go (a lent GPU machine): static builds
# of kvfs, the bench and both loopbacks in $(KIT), run there as
#   KVFS_BIN=$(KIT)/kvfs $(KIT)/kvfs-bench --loopback-bin $(KIT) ARGS
KIT ?= bin/kit
kit:
	mkdir -p $(KIT)
	for p in kvfs:./cmd/kvfs kvfs-bench:./cmd/kvfs-bench loopkp:./cmd/kvfs-bench/loopkp \
		loopback:github.com/hanwen/go-fuse/v2/example/loopback; do \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(KIT)/$${p%%:*} $${p#*:} || exit 1; done
	@echo "run: KVFS_BIN=$(KIT)/kvfs $(KIT)/kvfs-bench --loopback-bin $(KIT) [flags]"

clean:
	rm -rf bin

# kvfs where the shell that mount.fuse3 starts finds it (mount -t
# fuse.kvfs, /etc/fstab), and the systemd unit; see docs/operations.md.
PREFIX     ?= /usr/local
SYSTEMDDIR ?= /etc/systemd/system
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/kvfs
	install -D -m 0644 contrib/systemd/kvfs@.service $(DESTDIR)$(SYSTEMDDIR)/kvfs@.service

# The S3 server the remote tier's tests start: found, or built into the
# cache directory where they look (internal/s3local); prints its path.
s3server:
	$(GO) run ./internal/s3local/s3server
