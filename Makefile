# The two commands a new user runs first:
#   make demo   the classic incident replayed, naive vs outbox, on embedded SQLite + NATS (no server to install)
#   make test   the whole suite (go vet, then go test -race) against the real services
GO ?= go

.PHONY: demo test build vet bench chaos soak fmt cover

demo:
	$(GO) run ./cmd/outbox demo

test: vet
	$(GO) test -race -count=1 -timeout 25m ./...

vet:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || { echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...

build:
	$(GO) build -o bin/outbox ./cmd/outbox

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./store/... ./bench/...

# The fault-injection matrix (internal/chaos): every database x broker x fault, 30 s of load each, relays built with -race.
# Reports go to docs/guarantees-last-run.json; `go test ./...` runs a short form of it.
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
