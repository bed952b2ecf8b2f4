module github.com/outboxkit/outbox/internal/config

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/outboxkit/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/mysqlstore v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/pgcdc v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/pgstore v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/sqlitestore v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-sql-driver/mysql v1.10.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pglogrepl v0.0.0-20251213150135-2e8d0df862c1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)

replace (
	github.com/outboxkit/outbox => ../..
	github.com/outboxkit/outbox/internal/jsretry => ../jsretry
	github.com/outboxkit/outbox/internal/testsvc => ../testsvc
	github.com/outboxkit/outbox/store/mysqlstore => ../../store/mysqlstore
	github.com/outboxkit/outbox/store/pgcdc => ../../store/pgcdc
	github.com/outboxkit/outbox/store/pgstore => ../../store/pgstore
	github.com/outboxkit/outbox/store/sqlitestore => ../../store/sqlitestore
	github.com/outboxkit/outbox/store/storetest => ../../store/storetest
)
