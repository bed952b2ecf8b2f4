package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/outboxkit/outbox"
)

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// env returns a lookup over m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func loadFile(t *testing.T, name string, lookup func(string) (string, bool)) (*Config, error) {
	t.Helper()
	path := filepath.Join("testdata", name)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return load(path, data, lookup)
}

func TestDefault(t *testing.T) {
	t.Parallel()
	c := Default()
	require.Equal(t, DefaultTable, c.Table)
	require.Equal(t, 0, c.BatchSize, "sized by the relay")
	require.Equal(t, outbox.DefaultMinBatchSize, c.MinBatchSize)
	require.Equal(t, outbox.DefaultMaxBatchSize, c.MaxBatchSize)
	require.Equal(t, outbox.DefaultMinInFlight, c.MinInFlight)
	require.Equal(t, outbox.DefaultPollInterval, c.PollInterval)
	require.Equal(t, outbox.DefaultMinPollInterval, c.MinPollInterval)
	require.Equal(t, outbox.DefaultMaxInFlight, c.MaxInFlight)
	require.Equal(t, outbox.DefaultMaxAttempts, c.MaxAttempts)
	require.Equal(t, outbox.DefaultBackoffBase, c.BackoffBase)
	require.Equal(t, outbox.DefaultBackoffCap, c.BackoffCap)
	require.Equal(t, outbox.DefaultPublishTimeout, c.PublishTimeout)
	require.Equal(t, outbox.DefaultLease, c.Lease)
	require.Equal(t, outbox.DefaultProbeInterval, c.ProbeInterval)
	require.Equal(t, outbox.DefaultMaxProbeInterval, c.MaxProbeInterval)
	require.Equal(t, outbox.DefaultMaxPayloadSize, c.MaxPayload)
	require.Equal(t, 1, c.Relays)
	require.Equal(t, ConnsPerRelay+SpareConns, c.PoolSize())
	c.Relays = 4
	require.Equal(t, 4*ConnsPerRelay+SpareConns, c.PoolSize())
	c.Relays = 1
	require.Equal(t, outbox.DeadBlocks, c.RelayDeadPolicy())
	require.False(t, c.HeldClaims)

	// The defaults are valid once a database and a broker are named.
	c.DB, c.Broker = NewSecret("sqlite://x.db"), NewSecret("nats://127.0.0.1:4222")
	require.NoError(t, c.Validate())
}

func TestLoadGoodFiles(t *testing.T) {
	t.Parallel()
	t.Run("Minimal", func(t *testing.T) {
		t.Parallel()
		c, err := loadFile(t, "good_minimal.yaml", noEnv)
		require.NoError(t, err)
		require.NoError(t, c.Validate())
		require.Equal(t, "sqlite:///var/lib/outbox/outbox.db", c.DB.Value())
		require.Equal(t, []Broker{{Name: DefaultBrokerName, URL: NewSecret("nats://127.0.0.1:4222")}}, c.EffectiveBrokers())
		require.Equal(t, &Route{Broker: DefaultBrokerName}, c.EffectiveDefaultRoute())
		b := c.EffectiveBrokers()[0]
		require.Equal(t, DefaultNATSPrefix, b.EffectivePrefix())
		require.Equal(t, DefaultNATSStream, b.EffectiveStream())
		require.Equal(t, []string{DefaultNATSPrefix + ">"}, b.EffectiveSubjects())
		require.Equal(t, DefaultDuplicateWindow, b.EffectiveDuplicateWindow())
		require.Equal(t, Default().BatchSize, c.BatchSize, "unset keys keep their defaults")
	})
	t.Run("Full", func(t *testing.T) {
		t.Parallel()
		c, err := loadFile(t, "good_full.yaml", noEnv)
		require.NoError(t, err)
		require.NoError(t, c.Validate())
		prefix := func(s string) *string { return &s }
		want := &Config{
			DB:         NewSecret("postgres://outbox:s3cr3t-pw@db.internal:5432/shop?sslmode=disable"),
			Table:      "events.outbox_message",
			DBMaxConns: 12,
			Brokers: []Broker{
				{Name: "events", URL: NewSecret("nats://nats.internal:4222"), Stream: "ORDERS",
					Subjects: []string{"orders.>"}, Prefix: prefix("orders."), DuplicateWindow: 15 * time.Minute},
				{Name: "log", URL: NewSecret("kafka://k1:9092,k2:9092"), Prefix: prefix("shop.")},
				{Name: "rabbit", URL: NewSecret("amqp://guest:guest@rabbit:5672/"), Exchange: "events"},
				{Name: "streams", URL: NewSecret("redis://127.0.0.1:6379/0"), MaxLen: 100000, DedupTTL: 24 * time.Hour},
				{Name: "partners", URL: NewSecret("https://partner.example.com/hooks"),
					Secret: NewSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Concurrency: 8, Batch: 50,
					Headers: map[string]Secret{"Authorization": NewSecret("Bearer hunter2-token")}},
				{Name: "devices", URL: NewSecret("mqtt://127.0.0.1:1883"), Prefix: prefix("shop/")},
			},
			Routes: []Route{
				{EventType: "PARTNER_*", Broker: "partners"},
				{AggregateType: "payment", Broker: "rabbit", Topic: "payments.{{.EventType}}"},
			},
			DefaultRoute:     &Route{Broker: "events", Topic: "{{.AggregateType}}.{{.EventType}}"},
			Relays:           3,
			BatchSize:        250,
			MinBatchSize:     outbox.DefaultMinBatchSize,
			MaxBatchSize:     outbox.DefaultMaxBatchSize,
			PollInterval:     500 * time.Millisecond,
			MinPollInterval:  5 * time.Millisecond,
			MinInFlight:      outbox.DefaultMinInFlight,
			MaxInFlight:      4,
			MaxAttempts:      8,
			BackoffBase:      2 * time.Second,
			BackoffCap:       10 * time.Minute,
			PublishTimeout:   5 * time.Second,
			StoreTimeout:     4 * time.Second,
			Lease:            time.Minute,
			ProbeInterval:    time.Second,
			MaxProbeInterval: time.Minute,
			Notify:           true,
			NotifyTrigger:    true,
			BatchLease:       true,
			AsyncCommit:      true,
			DeleteSent:       true,
			Source:           SourceCDC,
			CDCSlot:          "shop_outbox_slot",
			CDCPublication:   "shop_outbox_pub",
			CDCFailoverAfter: 45 * time.Second,
			ArchiveEvery:     6 * time.Hour,
			ArchiveOlderThan: 30 * 24 * time.Hour,
			ArchiveBatch:     500,
			ArchiveDelete:    true,
			Ordering:         true,
			DeadPolicy:       "skip",
			RelayTTL:         15 * time.Second,
			MaxPayload:       262144,
			LogLevel:         "debug",
			LogFormat:        "text",
			Name:             "orders-relay",
			HTTP:             "127.0.0.1:9090",
			StatsInterval:    30 * time.Second,
			TraceExporter:    "otlp",
			TraceEndpoint:    "http://otel:4318",
		}
		require.Equal(t, want, c)
		require.Equal(t, 12, c.PoolSize())
		require.Equal(t, outbox.DeadSkips, c.RelayDeadPolicy())
		require.Equal(t, "", c.Brokers[2].EffectivePrefix(), "only nats has a default prefix")
		for _, printed := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), string(mustMarshal(t, c)), mustJSON(t, c)} {
			for _, secret := range []string{"s3cr3t-pw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "hunter2-token", "guest:guest"} {
				require.NotContains(t, printed, secret, "a printed config shows no secret")
			}
		}
	})
	t.Run("CommentsOnly", func(t *testing.T) {
		t.Parallel()
		c, err := loadFile(t, "good_comments_only.yaml", noEnv)
		require.NoError(t, err)
		require.Equal(t, Default(), c)
	})
}

func TestLoadBadFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want string // the whole error after "config testdata/FILE: "
	}{
		{"bad_unknown_key.yaml", `line 3: unknown key "batch_sise"`},
		{"bad_unknown_nested_key.yaml", `line 5: unknown key "brokers[0].strem"`},
		{"bad_wrong_type.yaml", `line 3: batch_size: "lots" is not a whole number`},
		{"bad_duration_number.yaml", `line 2: poll_interval: "5" is not a duration with a unit (500ms, 5s, 1m30s)`},
		{"bad_list_for_string.yaml", `line 3: table: expected a string, found a list`},
		{"bad_malformed.yaml", `line 2: did not find expected '-' indicator`},
		{"bad_two_documents.yaml", `line 2: a second YAML document; the config is one document`},
		{"bad_not_a_map.yaml", `line 1: the config must be a map of keys, found a list`},
	} {
		t.Run(strings.TrimSuffix(tc.file, ".yaml"), func(t *testing.T) {
			t.Parallel()
			c, err := loadFile(t, tc.file, noEnv)
			require.Nil(t, c)
			require.EqualError(t, err, "config "+filepath.Join("testdata", tc.file)+": "+tc.want)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "read config")
}

func TestParseMore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, wantErr string
	}{
		{"Empty", "", ""},
		{"Null", "~\n", ""},
		{"Scalar", "hello\n", "line 1: the config must be a map of keys, found a value"},
		{"SecretAsMap", "db:\n  host: x\n", "line 2: expected a string, found a map"},
		{"BoolWrongType", "ordering: maybe\n", `line 1: ordering: "maybe" is not true or false`},
		{"BrokersNotAList", "brokers: nats://x\n", `line 1: brokers: "nats://x" is not a list of brokers`},
		{"DefaultRouteNotAMap", "default_route: [a]\n", "line 1: default_route: expected a map of keys, found a list"},
		{"SubjectsNotAList", "brokers:\n  - name: a\n    subjects: x\n", `line 3: brokers[0].subjects: "x" is not a list of strings`},
		{"SeveralErrors", "batch_size: a\nrelays: b\n",
			`line 1: batch_size: "a" is not a whole number; line 2: relays: "b" is not a whole number`},
		{"NumberAsSecret", "db: 12345\n", ""},
		{"RepeatedKey", "relays: 1\nbatch_size: 2\nrelays: 3\n", `line 3: key "relays" is repeated (first on line 1)`},
		{"RepeatedNestedKey", "brokers:\n  - name: a\n    name: b\n", `line 3: key "name" is repeated (first on line 2)`},
		{"ManyKeys", strings.Repeat("x: 1\n", 20000), "line 1: a map of 20000 keys, more than 1000"},
		{"TooBig", "# " + strings.Repeat("x", 1<<20) + "\n", "the config is 1048579 bytes, more than 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tc.yaml))
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, c)
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c, err := loadFile(t, "invalid_values.yaml", noEnv)
	require.NoError(t, err)
	err = c.Validate()
	require.Error(t, err)
	var lines []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		lines = append(lines, e.Error())
	}
	require.Equal(t, []string{
		`db: unknown scheme "oracle"; want postgres://, postgresql://, sqlite://, mysql://`,
		`table: "x; drop table y" is not a valid table name (letters, digits and underscores, optionally schema.table)`,
		`brokers[0].exchange: applies to amqp://, amqps:// only, not nats://`,
		`brokers[1].name: "events" is used by another broker`,
		`brokers[1].url: unknown scheme "carrier-pigeon"; want nats://, kafka://, amqp://, amqps://, redis://, rediss://, http://, https://, mqtt://, mqtts://`,
		`routes[0].broker: no broker is named "nowhere"`,
		`routes[0].event_type: "ORDER_[" is not a valid pattern (* and ? wildcards, [a-z] classes)`,
		`routes[0].unroutable: "sometimes" is not retry or dead`,
		`relays: 0 is not between 1 and 256`,
		`batch_size: -1 is not between 0 (sized by the relay) and 100000`,
		`lease: 1s is shorter than twice publish_timeout (3s)`,
		`dead_policy: "sometimes" is not block or skip`,
		`log_format: "xml" is not text or json`,
	}, lines)
	require.NotContains(t, err.Error(), "tiger", "the password never shows")
}

func TestValidateCases(t *testing.T) {
	t.Parallel()
	valid := func() *Config {
		c := Default()
		c.DB = NewSecret("postgres://u:pw@localhost/db")
		c.Broker = NewSecret("nats://127.0.0.1:4222")
		return c
	}
	empty := ""
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string // "" = valid
	}{
		{"Valid", func(c *Config) {}, ""},
		{"NoDB", func(c *Config) { c.DB = Secret{} }, "db: required: the database URL (--db, OUTBOX_DB, or db: in the config file)"},
		{"DBNotAURL", func(c *Config) { c.DB = NewSecret("user:pw@tcp(host)/db") },
			`db: "user:REDACTED@tcp(host)/db" is not a URL; want postgres://, postgresql://, sqlite://, mysql://`},
		{"SQLiteNoPath", func(c *Config) { c.DB = NewSecret("sqlite://") }, "db: sqlite:// needs a file path"},
		{"MySQL", func(c *Config) { c.DB = NewSecret("mysql://root@127.0.0.1:3306/test") }, ""},
		{"SchemaTable", func(c *Config) { c.Table = "app.outbox" }, ""},
		{"TableTooDeep", func(c *Config) { c.Table = "a.b.c" }, `table: "a.b.c" is not a valid table name`},
		{"TableQuote", func(c *Config) { c.Table = `out"box` }, `table: "out\"box" is not a valid table name`},
		// Each database's own rule, as its store applies it (see TestTableRulesMatchStores).
		{"TableUpperCasePostgres", func(c *Config) { c.Table = "Outbox" },
			`table: "Outbox" is not a valid table name for postgres:// (name or schema.name, each part a lower-case letter`},
		{"TableUpperCaseSchemaPostgresql", func(c *Config) { c.DB = NewSecret("postgresql://h/db"); c.Table = "App.outbox" },
			`table: "App.outbox" is not a valid table name for postgres://`},
		{"TableUpperCaseMySQL", func(c *Config) { c.DB = NewSecret("mysql://h/db"); c.Table = "App.Outbox" }, ""},
		{"TableUpperCaseSQLite", func(c *Config) { c.DB = NewSecret("sqlite://x.db"); c.Table = "Outbox" }, ""},
		{"Table64MySQL", func(c *Config) { c.DB = NewSecret("mysql://h/db"); c.Table = strings.Repeat("t", 64) }, ""},
		{"Table64Postgres", func(c *Config) { c.Table = strings.Repeat("t", 64) }, "is not a valid table name for postgres://"},
		{"Table64SQLite", func(c *Config) { c.DB = NewSecret("sqlite://x.db"); c.Table = strings.Repeat("t", 64) },
			"is not a valid table name for sqlite:// (name or schema.name, each part a letter or underscore, then up to 62"},
		{"TableReservedSQLite", func(c *Config) { c.DB = NewSecret("sqlite://x.db"); c.Table = "main.SQLite_outbox" },
			`table: "main.SQLite_outbox" is not a valid table name for sqlite://: names starting with sqlite_ are reserved`},
		{"TableSQLitePrefixOnPostgres", func(c *Config) { c.Table = "sqlite_outbox" }, ""},
		{"TableUnknownDB", func(c *Config) { c.DB = NewSecret("oracle://h"); c.Table = "Outbox" }, `db: unknown scheme "oracle"`},
		{"NegativePool", func(c *Config) { c.DBMaxConns = -1 }, "db_max_conns: -1 is negative"},
		{"SourceCDC", func(c *Config) { c.Source = SourceCDC; c.CDCSlot = "orders_1"; c.CDCPublication = "Orders Pub" }, ""},
		{"SourceUnknown", func(c *Config) { c.Source = "binlog" }, `source: "binlog" is not polling or cdc`},
		{"SourceCDCMySQL", func(c *Config) { c.DB = NewSecret("mysql://h/db"); c.Source = SourceCDC },
			"source: applies to postgres:// only, not mysql://"},
		{"CDCSlotUpperCase", func(c *Config) { c.CDCSlot = "Orders" }, `cdc_slot: "Orders" is not 1 to 63 of a-z, 0-9 and _`},
		{"CDCSlot64", func(c *Config) { c.CDCSlot = strings.Repeat("s", 64) }, "cdc_slot: "},
		{"CDCPublication64", func(c *Config) { c.CDCPublication = strings.Repeat("p", 64) }, "is longer than 63 bytes"},
		{"CDCFailoverNegative", func(c *Config) { c.CDCFailoverAfter = -time.Second }, "cdc_failover_after: -1s is not positive"},
		{"NoBroker", func(c *Config) { c.Broker = Secret{} }, "broker: required: a broker URL"},
		{"BrokerAndBrokers", func(c *Config) { c.Brokers = []Broker{{Name: "x", URL: NewSecret("nats://h")}} },
			"broker: set either broker (one broker) or brokers (a list), not both"},
		{"UnknownBrokerScheme", func(c *Config) { c.Broker = NewSecret("sqs://queue") }, `broker.url: unknown scheme "sqs"`},
		{"TwoBrokersNoRoutes", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("nats://h")}, {Name: "b", URL: NewSecret("kafka://h")}}
		}, "routes: 2 brokers but no routes and no default_route"},
		{"BrokerWithoutName", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{URL: NewSecret("nats://h")}}
		}, "brokers[0].name: required"},
		{"NATSEmptyPrefixNoSubjects", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("nats://h"), Prefix: &empty}}
		}, "brokers[0].subjects: required when prefix is empty"},
		{"NATSBadStream", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("nats://h"), Stream: "a.b"}}
		}, `brokers[0].stream: "a.b" is not a valid stream name`},
		{"WebhookPrefix", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("https://h/x"), Prefix: &empty}}
		}, "brokers[0].prefix: applies to nats://, kafka://, amqp://, amqps://, redis://, rediss://, mqtt://, mqtts:// only, not https://"},
		{"WebhookOptionsOnNATS", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("nats://h"), Batch: 5, Headers: map[string]Secret{"X": {}}}}
		}, "brokers[0].batch: applies to http://, https:// only, not nats://\nbrokers[0].headers: applies to http://, https:// only, not nats://"},
		{"BadHeaderName", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("https://h/x"), Headers: map[string]Secret{"X Y": {}}}}
		}, `brokers[0].headers: "X Y" is not a header name`},
		{"WebhookPlaceholderInHost", func(c *Config) { c.Broker = NewSecret("https://{destination}.h/x?token=s3cret-tok") },
			"broker.url: endpoint: {destination} may stand in the path only, not in the host"},
		{"WebhookPlaceholderInPath", func(c *Config) { c.Broker = NewSecret("https://h/in/{destination}?token=s3cret-tok") }, ""},
		{"WebhookEmptyKey", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("https://h/x"), Secret: NewSecret("whsec_")}}
		}, "brokers[0].secret: the key has 0 bytes, fewer than 16"},
		{"WebhookShortRawKey", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("https://h/x"), Secret: NewSecret("s3cret-tok")}}
		}, "brokers[0].secret: the key has 10 bytes, fewer than 16"},
		{"WebhookPermanentStatus", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("https://h/x"), PermanentStatus: []int{400, 200, 600}}}
		}, "brokers[0].permanent_status: 200 is not a status code from 300 to 599\nbrokers[0].permanent_status: 600 is not a status code from 300 to 599"},
		{"PermanentStatusOnNATS", func(c *Config) {
			c.Broker = Secret{}
			c.Brokers = []Broker{{Name: "a", URL: NewSecret("nats://h"), PermanentStatus: []int{}}}
		}, "brokers[0].permanent_status: applies to http://, https:// only, not nats://"},
		{"RouteMatchesNothing", func(c *Config) { c.Routes = []Route{{Broker: "default"}} },
			"routes[0]: needs event_type or aggregate_type"},
		{"DefaultRouteWithMatcher", func(c *Config) { c.DefaultRoute = &Route{Broker: "default", EventType: "X"} },
			"default_route: takes what no route matched"},
		{"RouteToShorthandBroker", func(c *Config) {
			c.Routes = []Route{{EventType: "ORDER_*", Broker: "default", Topic: "orders.{{.EventType}}"}}
			c.DefaultRoute = &Route{Broker: "default"}
		}, ""},
		{"BackoffCapBelowBase", func(c *Config) { c.BackoffCap = time.Millisecond }, "backoff_cap: 1ms is below backoff_base (1s)"},
		{"ZeroPoll", func(c *Config) { c.PollInterval = 0 }, "poll_interval: 0s is not positive"},
		{"ZeroAttempts", func(c *Config) { c.MaxAttempts = 0 }, "max_attempts: 0 is less than 1"},
		{"ProbeRange", func(c *Config) { c.MaxProbeInterval = time.Millisecond }, "max_probe_interval: 1ms is below probe_interval (2s)"},
		{"NegativePayload", func(c *Config) { c.MaxPayload = -1 }, "max_payload: -1 is negative"},
		{"LogLevel", func(c *Config) { c.LogLevel = "verbose" }, `log_level: "verbose" is not debug, info, warn or error`},
		{"HTTPAddr", func(c *Config) { c.HTTP = "9090" }, `http: "9090" is not host:port; want an address like 127.0.0.1:9090`},
		{"NotifyPostgres", func(c *Config) { c.Notify = true }, ""},
		{"NotifySQLite", func(c *Config) { c.Notify = true; c.DB = NewSecret("sqlite://x.db") }, "notify: applies to postgres:// only, not sqlite://"},
		{"PgstoreSwitchesPostgres", func(c *Config) { c.NotifyTrigger, c.BatchLease, c.AsyncCommit = true, true, true }, ""},
		{"PgstoreSwitchesPostgresql", func(c *Config) {
			c.NotifyTrigger, c.BatchLease, c.AsyncCommit = true, true, true
			c.DB = NewSecret("postgresql://h/db")
		}, ""},
		{"NotifyTriggerSQLite", func(c *Config) { c.NotifyTrigger = true; c.DB = NewSecret("sqlite://x.db") },
			"notify_trigger: applies to postgres:// only, not sqlite://"},
		{"BatchLeaseMySQL", func(c *Config) { c.BatchLease = true; c.DB = NewSecret("mysql://u:p@h:3306/db") },
			"batch_lease: applies to postgres:// only, not mysql://"},
		{"AsyncCommitSQLite", func(c *Config) { c.AsyncCommit = true; c.DB = NewSecret("sqlite://x.db") },
			"async_commit: applies to postgres:// only, not sqlite://"},
		{"SourceCDCPostgres", func(c *Config) { c.Source, c.CDCSlot = SourceCDC, "my_slot" }, ""},
		{"SourceCDCMySQL", func(c *Config) { c.Source = SourceCDC; c.DB = NewSecret("mysql://u:p@h:3306/db") },
			"source: applies to postgres:// only, not mysql://"},
		{"SourceUnknown", func(c *Config) { c.Source = "binlog" }, `source: "binlog" is not polling or cdc`},
		{"CDCFailoverAfterZero", func(c *Config) { c.Source, c.CDCFailoverAfter = SourceCDC, 0 }, "cdc_failover_after: 0s is not positive"},
		{"HeldClaimsPostgres", func(c *Config) { c.HeldClaims, c.AsyncCommit, c.NotifyTrigger, c.Ordering = true, true, true, false }, ""},
		{"HeldClaimsOrdered", func(c *Config) { c.HeldClaims = true },
			"held_claims: needs ordering: false (ordered claims lease their rows; they are never held)"},
		{"HeldClaimsMySQL", func(c *Config) { c.HeldClaims = true; c.DB = NewSecret("mysql://u:p@h:3306/db") },
			"held_claims: applies to postgres:// only, not mysql://"},
		{"HeldClaimsSQLite", func(c *Config) { c.HeldClaims = true; c.DB = NewSecret("sqlite://x.db") },
			"held_claims: applies to postgres:// only, not sqlite://"},
		{"HeldClaimsWithBatchLease", func(c *Config) { c.HeldClaims, c.BatchLease = true, true },
			"held_claims: excludes batch_lease: they are two ways of claiming; choose one"},
		{"AllPgstoreSwitchesSQLite", func(c *Config) {
			c.Notify, c.NotifyTrigger, c.BatchLease, c.AsyncCommit, c.HeldClaims = true, true, true, true, true
			c.DB = NewSecret("sqlite://x.db")
		}, "notify_trigger: applies to postgres:// only, not sqlite://\nbatch_lease: applies to postgres:// only, not sqlite://\n" +
			"notify: applies to postgres:// only, not sqlite://\nasync_commit: applies to postgres:// only, not sqlite://\n" +
			"held_claims: applies to postgres:// only, not sqlite://"},
		{"BadName", func(c *Config) { c.Name = "my relay" }, `name: "my relay" is not a valid name`},
		{"StatsInterval", func(c *Config) { c.StatsInterval = 0 }, "stats_interval: 0s is not positive"},
		{"TraceExporter", func(c *Config) { c.TraceExporter = "jaeger" }, `trace_exporter: "jaeger" is not none, stdout or otlp`},
		{"TraceEndpointWithoutOTLP", func(c *Config) { c.TraceEndpoint = "http://x" }, `trace_endpoint: applies to trace_exporter otlp only, not "none"`},
		{"OTLP", func(c *Config) { c.TraceExporter, c.TraceEndpoint = "otlp", "http://x:4318" }, ""},
		{"MinPoll", func(c *Config) { c.MinPollInterval = 0 }, "min_poll_interval: 0s is less than 1ms"},
		{"RelayTTL", func(c *Config) { c.RelayTTL = 100 * time.Millisecond }, "relay_ttl: 100ms is neither 0 nor at least 300ms"},
		{"InFlight", func(c *Config) { c.MaxInFlight = 65 }, "max_in_flight: 65 is not between min_in_flight (1) and 64"},
		{"InFlightFixed", func(c *Config) { c.MinInFlight, c.MaxInFlight = 8, 8 }, ""},
		{"InFlightBelowMin", func(c *Config) { c.MinInFlight, c.MaxInFlight = 3, 2 }, "max_in_flight: 2 is not between min_in_flight (3) and 64"},
		{"MinInFlightZero", func(c *Config) { c.MinInFlight = 0 }, "min_in_flight: 0 is not between 1 and 64"},
		{"BatchSizeFixed", func(c *Config) { c.BatchSize = 100 }, ""},
		{"BatchSizeTooBig", func(c *Config) { c.BatchSize = 100_001 }, "batch_size: 100001 is not between 0 (sized by the relay) and 100000"},
		{"MinBatchSizeZero", func(c *Config) { c.MinBatchSize = 0 }, "min_batch_size: 0 is not between 1 and 100000"},
		{"MaxBatchSizeBelowMin", func(c *Config) { c.MinBatchSize, c.MaxBatchSize = 500, 400 },
			"max_batch_size: 400 is not between min_batch_size (500) and 100000"},
		{"TooManyRelays", func(c *Config) { c.Relays = 1000 }, "relays: 1000 is not between 1 and 256"},
		// Addresses and URLs are checked whole here (exit 2), not when the daemon dials or listens (exit 1).
		{"HTTPPortTooBig", func(c *Config) { c.HTTP = "127.0.0.1:99999" },
			`http: "127.0.0.1:99999" port "99999" is not a number from 0 to 65535; want an address like 127.0.0.1:9090`},
		{"HTTPPortNegative", func(c *Config) { c.HTTP = ":-1" }, `http: ":-1" port "-1" is not a number`},
		{"HTTPPortName", func(c *Config) { c.HTTP = "localhost:http" }, `http: "localhost:http" port "http" is not a number`},
		{"HTTPNoPort", func(c *Config) { c.HTTP = "127.0.0.1" }, `http: "127.0.0.1" is not host:port`},
		{"HTTPBadHost", func(c *Config) { c.HTTP = "my host:9090" }, `http: "my host:9090" host "my host" is not an IP address or a host name`},
		{"HTTPAnyInterface", func(c *Config) { c.HTTP = ":9090" }, ""},
		{"HTTPFreePort", func(c *Config) { c.HTTP = "127.0.0.1:0" }, ""},
		{"HTTPIPv6", func(c *Config) { c.HTTP = "[::1]:9090" }, ""},
		{"HTTPHostName", func(c *Config) { c.HTTP = "relay-1.internal:9090" }, ""},
		{"DBPortTooBig", func(c *Config) { c.DB = NewSecret("postgres://u:hunter22@db:99999/x") },
			`db: the URL port "99999" is not a number from 1 to 65535`},
		{"DBPortZero", func(c *Config) { c.DB = NewSecret("mysql://root@db:0/x") }, `db: the URL port "0" is not a number from 1 to 65535`},
		{"DBBadPort", func(c *Config) { c.DB = NewSecret("postgres://u:hunter22@db:5o32/x") }, `db: the URL is not a valid URL: invalid port ":5o32" after host`},
		{"DBSeveralHosts", func(c *Config) { c.DB = NewSecret("postgres://u@db1:5432,db2:5433/x") }, ""},
		{"DBSeveralHostsOneBad", func(c *Config) { c.DB = NewSecret("postgres://u@db1:5432,db2:70000/x") }, `port "70000"`},
		{"BrokerPortTooBig", func(c *Config) { c.Broker = NewSecret("nats://u:hunter22@127.0.0.1:99999") },
			`broker.url: the URL port "99999" is not a number from 1 to 65535`},
		{"KafkaSeedsOneBad", func(c *Config) { c.Broker = NewSecret("kafka://k1:9092,k2:65536") }, `broker.url: the URL port "65536"`},
		{"KafkaSeeds", func(c *Config) { c.Broker = NewSecret("kafka://k1:9092,k2:9092") }, ""},
		{"WebhookNoPort", func(c *Config) { c.Broker = NewSecret("https://hooks.example.com/in?key=hunter22") }, ""},
		{"TraceEndpointNoScheme", func(c *Config) { c.TraceExporter, c.TraceEndpoint = "otlp", "collector:4318" },
			`trace_endpoint: "collector:4318" is not an http:// or https:// URL with a host`},
		{"TraceEndpointPort", func(c *Config) { c.TraceExporter, c.TraceEndpoint = "otlp", "http://collector:99999" },
			`trace_endpoint: "http://collector:99999" port "99999"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tc.change(c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "s3cret-tok", "no problem shows a secret")
		})
	}
}

func TestValidateDBOnly(t *testing.T) {
	t.Parallel()
	c := Default()
	c.DB = NewSecret("sqlite://x.db")
	require.NoError(t, c.ValidateDB(), "migrate and status need no broker")
	require.Error(t, c.Validate())
	c.Table = "x; drop table y"
	require.ErrorContains(t, c.ValidateDB(), "table:")
}

// TestValidateDBPgstoreSwitches checks what `outbox migrate` refuses: it acts
// on notify_trigger and batch_lease, so those are checked with the database;
// notify, async_commit and held_claims concern only the relay.
func TestValidateDBPgstoreSwitches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		db     string
		change func(*Config)
		want   string // "" = valid
	}{
		{"NotifyTriggerPostgres", "postgres://h/db", func(c *Config) { c.NotifyTrigger = true }, ""},
		{"BatchLeasePostgres", "postgres://h/db", func(c *Config) { c.BatchLease = true }, ""},
		{"NotifyTriggerSQLite", "sqlite://x.db", func(c *Config) { c.NotifyTrigger = true },
			"notify_trigger: applies to postgres:// only, not sqlite://"},
		{"BatchLeaseSQLite", "sqlite://x.db", func(c *Config) { c.BatchLease = true },
			"batch_lease: applies to postgres:// only, not sqlite://"},
		{"BatchLeaseMySQL", "mysql://u:p@h:3306/db", func(c *Config) { c.BatchLease = true },
			"batch_lease: applies to postgres:// only, not mysql://"},
		{"RelayOnlySwitchesSQLite", "sqlite://x.db", func(c *Config) { c.Notify, c.AsyncCommit, c.HeldClaims = true, true, true }, ""},
		// The relay refuses the two together; migrate only creates the lease table.
		{"HeldClaimsWithBatchLease", "postgres://h/db", func(c *Config) { c.HeldClaims, c.BatchLease = true, true }, ""},
		{"NoDB", "", func(c *Config) { c.BatchLease = true },
			"db: required: the database URL (--db, OUTBOX_DB, or db: in the config file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			c.DB = NewSecret(tc.db)
			tc.change(c)
			err := c.ValidateDB()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
}

// TestPoolSize checks the automatic pool size: a relay loop with held claims
// holds a connection per batch in flight while it publishes.
func TestPoolSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   int
	}{
		{"Defaults", func(c *Config) {}, ConnsPerRelay + SpareConns},
		{"Relays", func(c *Config) { c.Relays = 4 }, 4*ConnsPerRelay + SpareConns},
		{"InFlightAlone", func(c *Config) { c.MaxInFlight = 4 }, ConnsPerRelay + SpareConns},
		{"HeldClaims", func(c *Config) { c.Ordering = false; c.HeldClaims, c.MaxInFlight = true, 4 }, 4 + SpareConns},
		{"HeldClaimsRelays", func(c *Config) { c.Ordering = false; c.HeldClaims, c.MaxInFlight, c.Relays = true, 4, 3 }, 3*4 + SpareConns},
		{"HeldClaimsDefaults", func(c *Config) { c.Ordering = false; c.HeldClaims = true }, outbox.DefaultMaxInFlight + SpareConns},
		{"HeldClaimsAdaptive", func(c *Config) { c.Ordering = false; c.HeldClaims, c.MinInFlight, c.MaxInFlight = true, 1, 6 }, 6 + SpareConns},
		{"HeldClaimsOneInFlight", func(c *Config) { c.Ordering = false; c.HeldClaims, c.MaxInFlight = true, 1 }, ConnsPerRelay + SpareConns},
		{"HeldClaimsOrdered", func(c *Config) { c.HeldClaims, c.MaxInFlight, c.Ordering = true, 4, true }, ConnsPerRelay + SpareConns},
		{"Explicit", func(c *Config) { c.HeldClaims, c.MaxInFlight, c.DBMaxConns = true, 8, 3 }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.change(c)
			require.Equal(t, tc.want, c.PoolSize())
		})
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	c, err := loadFile(t, "good_full.yaml", env(map[string]string{
		"OUTBOX_BATCH_SIZE":    "7",
		"OUTBOX_POLL_INTERVAL": "250ms",
		"OUTBOX_DELETE_SENT":   "false",
		"OUTBOX_TABLE":         "other",
		"OUTBOX_DB":            "sqlite://env.db",
		"OUTBOX_MAX_ATTEMPTS":  "", // empty: ignored for a number
		"OUTBOX_HTTP":          "", // empty: counts for a string
		"OUTBOX_UNRELATED":     "x",
	}))
	require.NoError(t, err)
	require.Equal(t, 7, c.BatchSize, "env beats file")
	require.Equal(t, 250*time.Millisecond, c.PollInterval)
	require.False(t, c.DeleteSent)
	require.Equal(t, "other", c.Table)
	require.Equal(t, "sqlite://env.db", c.DB.Value())
	require.Equal(t, 8, c.MaxAttempts, "the file's value stays")
	require.Equal(t, "", c.HTTP)
	require.Equal(t, "text", c.LogFormat, "no variable: the file's value")

	for _, tc := range []struct{ env, value, want string }{
		{"OUTBOX_BATCH_SIZE", "ten", `OUTBOX_BATCH_SIZE: "ten" is not a whole number`},
		{"OUTBOX_LEASE", "30", `OUTBOX_LEASE: "30" is not a duration (like 500ms, 2s, 1m30s)`},
		{"OUTBOX_ORDERING", "yes please", `OUTBOX_ORDERING: "yes please" is not true or false`},
		{"OUTBOX_BATCH_LEASE", "on", `OUTBOX_BATCH_LEASE: "on" is not true or false`},
		{"OUTBOX_HELD_CLAIMS", "yes", `OUTBOX_HELD_CLAIMS: "yes" is not true or false`},
	} {
		_, err := load("", nil, env(map[string]string{tc.env: tc.value}))
		require.EqualError(t, err, tc.want)
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	s := Settings()
	byKey := make(map[string]Setting, len(s))
	for _, st := range s {
		byKey[st.Key] = st
		require.Equal(t, strings.ReplaceAll(st.Key, "_", "-"), st.Flag)
		require.Equal(t, "OUTBOX_"+strings.ToUpper(st.Key), st.Env)
		require.NotEmpty(t, st.Usage, st.Key)
		c := Default()
		if st.Default != "" {
			require.NoError(t, c.Set(st.Key, st.Default), "%s: its default parses", st.Key)
			require.Equal(t, Default(), c, "%s: setting the default changes nothing", st.Key)
		}
	}
	for _, key := range []string{"db", "broker", "table", "batch_size", "poll_interval", "max_attempts",
		"backoff_base", "backoff_cap", "publish_timeout", "store_timeout", "lease", "notify", "delete_sent", "min_poll_interval", "max_in_flight", "min_in_flight", "min_batch_size", "max_batch_size", "ordering", "dead_policy",
		"max_payload", "log_level", "log_format", "relays", "db_max_conns", "http", "name", "stats_interval",
		"trace_exporter", "trace_endpoint", "notify_trigger", "batch_lease", "async_commit", "held_claims", "relay_ttl"} {
		require.Contains(t, byKey, key)
	}
	require.Equal(t, "0", byKey["batch_size"].Default)
	require.Equal(t, "1000", byKey["max_batch_size"].Default)
	require.Equal(t, "1s", byKey["poll_interval"].Default)
	require.True(t, byKey["delete_sent"].Bool)

	// Every YAML key of Config that is a scalar is a setting, and the reverse.
	var yamlKeys []string
	for _, line := range strings.Split(string(mustMarshal(t, Default())), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") && v != "" && strings.TrimSpace(v) != "[]" {
			yamlKeys = append(yamlKeys, k)
		}
	}
	for _, k := range yamlKeys {
		if k == "default_route" {
			continue
		}
		require.Contains(t, byKey, k, "YAML key %s has no flag or variable", k)
	}
	require.EqualError(t, Default().Set("nope", "1"), `unknown setting "nope"`)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestSecretRedacts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"postgres://outbox:hunter2@db:5432/shop?sslmode=disable", "postgres://outbox:REDACTED@db:5432/shop?sslmode=disable"},
		{"postgres://db:5432/shop?password=hunter2&sslmode=require", "postgres://db:5432/shop?password=REDACTED&sslmode=require"},
		{"amqp://guest:hunter2@rabbit:5672/", "amqp://guest:REDACTED@rabbit:5672/"},
		{"https://h/hook?token=hunter2", "https://h/REDACTED?token=REDACTED"},
		{"https://hooks.example.com/services/T0/B0/XXXX?code=az1#f", "https://hooks.example.com/REDACTED?code=REDACTED#REDACTED"},
		{"http://tok3n@h/{destination}", "http://REDACTED@h/REDACTED"},
		{"https://h/", "https://h/"},
		{"sqlite:///var/lib/outbox.db", "sqlite:///var/lib/outbox.db"},
		{"nats://a:4222,nats://b:4222", "nats://a:4222,nats://b:4222"},
		{"nats://u:hunter2@a:4222,nats://u:hunter2@b:4222", "nats://u:REDACTED@a:4222,nats://u:REDACTED@b:4222"},
		{"kafka://u:hunter2@k1:9092,k2:9092?sasl=plain", "kafka://u:REDACTED@k1:9092,k2:9092?sasl=plain"},
		{"postgres://u:hun,ter2@h/db", "postgres://REDACTED,REDACTED@h/db"},
		{"kafka://k1,k2?password=hunter2", "kafka://k1,k2?password=REDACTED"},
		{"postgres://u:hunter2@h:notaport/db", "postgres://REDACTED"}, // does not parse: masked after the scheme
		{"root:hunter2@tcp(127.0.0.1:3306)/test", "root:REDACTED@tcp(127.0.0.1:3306)/test"},
		{"whsec_hunter2", "REDACTED"},
		{"postgres://u:p%40ss@h/db", "postgres://u:REDACTED@h/db"},
	} {
		s := NewSecret(tc.in)
		require.Equal(t, tc.want, s.Redacted(), tc.in)
		require.Equal(t, tc.in, s.Value())
		for _, printed := range []string{
			s.String(), fmt.Sprint(s), fmt.Sprintf("%v %s %+v", s, s, s), fmt.Sprintf("%#v", s),
			fmt.Sprint(struct{ DB Secret }{s}), string(mustMarshal(t, s)), mustJSON(t, s), logged(s),
		} {
			for _, pw := range []string{"hunter2", "hun", "ter2"} {
				if strings.Contains(tc.in, pw) {
					require.NotContains(t, printed, pw)
				}
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func logged(s Secret) string {
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "dsn", s)
	return b.String()
}

func TestSecretScheme(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"POSTGRES://x": "postgres", "sqlite://x": "sqlite", "x": "", "://x": "", "a b://x": "", "": "",
	} {
		require.Equal(t, want, NewSecret(in).Scheme(), in)
	}
}

func TestErrorsNeverLeakDBPassword(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("db: carrier://u:hunter2@h/db\ntable: 'bad name'\n"))
	require.NoError(t, err)
	err = c.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
}

// The example file in the package documentation parses and validates.
func TestDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, example, ok := strings.Cut(string(doc), "# Example file\n//\n")
	require.True(t, ok)
	var lines []string
	for _, l := range strings.Split(example, "\n") {
		if y, ok := strings.CutPrefix(l, "//\t"); ok {
			lines = append(lines, y)
		}
	}
	c, err := Parse([]byte(strings.Join(lines, "\n")))
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Len(t, c.Brokers, 2)
	require.Equal(t, "shop-relay", c.Name)
}

// permanent_status: an absent key keeps the publisher's default (nil), an
// empty list means no status is permanent.
func TestPermanentStatusYAML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		want       []int
	}{
		{"Absent", "", nil},
		{"Empty", "    permanent_status: []\n", []int{}},
		{"Listed", "    permanent_status: [400, 422]\n", []int{400, 422}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte("db: sqlite://x.db\nbrokers:\n  - name: w\n    url: https://h/x\n" + tc.line))
			require.NoError(t, err)
			require.NoError(t, c.Validate())
			require.Equal(t, tc.want, c.Brokers[0].PermanentStatus)
		})
	}
}

// TestBatchSizes: batch_size fixes the batch size; 0 (the default) leaves it
// to the relay between min_batch_size and max_batch_size.
func TestBatchSizes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		change         func(*Config)
		wantLo, wantHi int
	}{
		{"Defaults", func(c *Config) {}, outbox.DefaultMinBatchSize, outbox.DefaultMaxBatchSize},
		{"Range", func(c *Config) { c.MinBatchSize, c.MaxBatchSize = 50, 5000 }, 50, 5000},
		{"Fixed", func(c *Config) { c.BatchSize = 100 }, 100, 100},
		{"FixedWinsOverRange", func(c *Config) { c.BatchSize, c.MinBatchSize, c.MaxBatchSize = 200, 50, 5000 }, 200, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			tc.change(c)
			lo, hi := c.BatchSizes()
			require.Equal(t, []int{tc.wantLo, tc.wantHi}, []int{lo, hi})
		})
	}
}

func TestCDCNames(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Table = "shop.outbox_message"
	require.Equal(t, "outbox_shop_outbox_message", c.CDCSlotName())
	require.Equal(t, "outbox_shop_outbox_message_pub", c.CDCPublicationName())
	c.CDCSlot, c.CDCPublication = "mine", "my_pub"
	require.Equal(t, "mine", c.CDCSlotName())
	require.Equal(t, "my_pub", c.CDCPublicationName())
}
