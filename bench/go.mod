module github.com/outboxkit/outbox/bench

go 1.26.0

require (
	github.com/eclipse/paho.mqtt.golang v1.5.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/nats-io/nats.go v1.55.0
	github.com/outboxkit/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/internal/benchcmd v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/internal/testsvc v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/amqppub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/kafkapub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/mqttpub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/natspub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/publisher/redispub v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/mysqlstore v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/pgstore v0.0.0-00010101000000-000000000000
	github.com/outboxkit/outbox/store/sqlitestore v0.0.0-00010101000000-000000000000
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-sql-driver/mysql v1.10.1 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pglogrepl v0.0.0-20251213150135-2e8d0df862c1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/outboxkit/outbox/internal/embeddednats v0.0.0-00010101000000-000000000000 // indirect
	github.com/outboxkit/outbox/internal/jsretry v0.0.0-00010101000000-000000000000 // indirect
	github.com/outboxkit/outbox/store/pgcdc v0.0.0-00010101000000-000000000000 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)

replace (
	github.com/outboxkit/outbox => ..
	github.com/outboxkit/outbox/internal/benchcmd => ../internal/benchcmd
	github.com/outboxkit/outbox/internal/embeddednats => ../internal/embeddednats
	github.com/outboxkit/outbox/internal/jsretry => ../internal/jsretry
	github.com/outboxkit/outbox/internal/testsvc => ../internal/testsvc
	github.com/outboxkit/outbox/publisher/amqppub => ../publisher/amqppub
	github.com/outboxkit/outbox/publisher/kafkapub => ../publisher/kafkapub
	github.com/outboxkit/outbox/publisher/mqttpub => ../publisher/mqttpub
	github.com/outboxkit/outbox/publisher/natspub => ../publisher/natspub
	github.com/outboxkit/outbox/publisher/redispub => ../publisher/redispub
	github.com/outboxkit/outbox/store/mysqlstore => ../store/mysqlstore
	github.com/outboxkit/outbox/store/pgcdc => ../store/pgcdc
	github.com/outboxkit/outbox/store/pgstore => ../store/pgstore
	github.com/outboxkit/outbox/store/sqlitestore => ../store/sqlitestore
	github.com/outboxkit/outbox/store/storetest => ../store/storetest
)
