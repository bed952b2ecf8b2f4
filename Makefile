# The two commands a new user runs first:
#   make demo   the classic incident replayed, naive vs outbox, on embedded SQLite + NATS (no server to install)
#   make test   the whole suite (go vet, then go test -race) against the real services
GO ?= go

.PHONY: demo test build vet bench chaos fmt cover

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

fmt:
	gofmt -w .
