# The two commands a new user runs first:
#   make demo   the classic incident replayed, naive vs outbox, on embedded SQLite + NATS (no server to install)
#   make test   the whole suite (go vet, then go test -race) against the real services
GO ?= go
# The repository is a set of modules (docs/modules.md) tied together by go.work. An import-path pattern crosses module
# boundaries in a workspace, where ./... does not, so ALL names every package of every module in go.work.
ALL := github.com/outboxkit/outbox/...

.PHONY: demo test build vet bench chaos soak fmt cover tidy modcheck

demo:
	$(GO) run ./cmd/outbox demo

test: vet
	$(GO) test -race -count=1 -timeout 25m $(ALL)

vet: modcheck
	@files="$$(gofmt -l .)"; test -z "$$files" || { echo "$$files" >&2; echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet $(ALL)

# Every go.mod in the tree must be in go.work (or $(ALL) would skip its tests) and tidy on its own (what a user's
# `go get` sees; go mod tidy ignores go.work and resolves our modules through each go.mod's replace lines).
modcheck:
	@mods="$$($(GO) list -m -f '{{.Dir}}')"; for f in $$(find $(CURDIR) -name go.mod -not -path '*/.git/*'); do \
		echo "$$mods" | grep -qx "$$(dirname $$f)" || { echo "$$f is not in go.work"; exit 1; }; done; \
	for d in $$mods; do (cd $$d && $(GO) mod tidy -diff >/dev/null) || \
		{ echo "$$d: go.mod or go.sum is not tidy; run make tidy"; exit 1; }; done

tidy:
	@for d in $$($(GO) list -m -f '{{.Dir}}'); do (cd $$d && $(GO) mod tidy) || exit 1; done

build:
	$(GO) build -o bin/outbox ./cmd/outbox

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 github.com/outboxkit/outbox/store/... github.com/outboxkit/outbox/bench/...

# The fault-injection matrix (internal/chaos): every database x broker x fault, 30 s of load each, relays built with -race.
# Reports go to docs/guarantees-last-run.json; `make test` runs a short form of it.
chaos:
	OUTBOX_CHAOS=full OUTBOX_CHAOS_REPORT=$(CURDIR)/docs/guarantees-last-run.json \
		$(GO) test -race -count=1 -timeout 120m -run '^TestChaos$$' -v ./internal/chaos

# The soak (internal/soak): 1,000,000 messages at a steady 1,200/s, PostgreSQL -> NATS, two relay processes restarted
# along the way; checks delivery, flat relay memory, a bounded table and the relays' logs (about a quarter of an hour).
soak:
	OUTBOX_SOAK=1 OUTBOX_SOAK_REPORT=$(CURDIR)/docs/soak-last-run.md \
		$(GO) test -count=1 -timeout 60m -run '^TestSoak$$' -v ./internal/soak

fmt:
	gofmt -w .
