module github.com/outboxkit/outbox/internal/chaos

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/nats-io/nats.go v1.55.0
	github.com/outboxkit/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/internal/config v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/internal/testsvc v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/natspub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/redispub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/mysqlstore v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/pgcdc v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/pgstore v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pglogrepl v0.0.0-20251213150135-2e8d0df862c1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/outboxkit/outbox/internal/jsretry v0.0.0-00010101000000-000000000000 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/outboxkit/outbox => ../..
	github.com/outboxkit/outbox/internal/config => ../config
	github.com/outboxkit/outbox/internal/jsretry => ../jsretry
	github.com/outboxkit/outbox/internal/testsvc => ../testsvc
	github.com/outboxkit/outbox/publisher/natspub => ../../publisher/natspub
	github.com/outboxkit/outbox/publisher/redispub => ../../publisher/redispub
	github.com/outboxkit/outbox/store/mysqlstore => ../../store/mysqlstore
	github.com/outboxkit/outbox/store/pgcdc => ../../store/pgcdc
	github.com/outboxkit/outbox/store/pgstore => ../../store/pgstore
	github.com/outboxkit/outbox/store/sqlitestore => ../../store/sqlitestore
	github.com/outboxkit/outbox/store/storetest => ../../store/storetest
)
