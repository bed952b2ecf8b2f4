package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/publisher/cepub"
)

// Defaults of the daemon's own settings (the relay's come from the outbox
// package's Default* constants).
const (
	// DefaultTable is the outbox table's name.
	DefaultTable = "outbox_message"
	// DefaultRelays is how many relay loops one process runs.
	DefaultRelays = 1
	// ConnsPerRelay is what an automatic pool size (db_max_conns: 0) gives
	// each relay loop: a loop claims, then acknowledges, one after the other,
	// so it never holds two connections at once. (A PostgreSQL LISTEN, with
	// notify on, holds a connection of its own outside the pool. With
	// held_claims a loop holds one per batch in flight: see Config.PoolSize.)
	ConnsPerRelay = 1
	// SpareConns is what an automatic pool size adds for health checks.
	SpareConns = 2
	// DefaultLogLevel and DefaultLogFormat: the daemon logs JSON at info.
	DefaultLogLevel  = "info"
	DefaultLogFormat = "json"
	// UnroutableRetry and UnroutableDead are the values of a route's
	// unroutable key; empty means UnroutableRetry.
	UnroutableRetry = "retry"
	UnroutableDead  = "dead"
	// DefaultDeadPolicy is what ordered delivery does behind a dead message.
	DefaultDeadPolicy = "block"
	// DefaultName names the relay process in logs and in the relay label of
	// its metrics (metrics.DefaultRelayName).
	DefaultName = "default"
	// DefaultStatsInterval is how often the daemon reads the table's backlog
	// for its metrics (metrics.DefaultStatsInterval).
	DefaultStatsInterval = 15 * time.Second
	// DefaultTraceExporter turns tracing off.
	DefaultTraceExporter = "none"
	// DefaultBrokerName names the broker given by the broker shorthand.
	DefaultBrokerName = "default"
	// DefaultNATSStream is the JetStream stream the daemon ensures for a nats:// broker.
	DefaultNATSStream = "OUTBOX"
	// DefaultNATSPrefix is put before each destination to make a NATS subject,
	// so that one stream (capturing "outbox.>") holds every message.
	DefaultNATSPrefix = "outbox."
	// SourcePolling and SourceCDC are the values of the source key: where a
	// relay finds the messages to publish.
	SourcePolling = "polling"
	SourceCDC     = "cdc"
	// DefaultSource is polling: claim rows from the table.
	DefaultSource = SourcePolling
	// DefaultCDCFailoverAfter is how long a CDC relay may be unable to
	// stream before it polls the table instead.
	DefaultCDCFailoverAfter = 30 * time.Second
	// DefaultDuplicateWindow is the NATS stream's duplicate window: longer
	// than a lease plus a retry, so a re-sent message is dropped by the stream.
	DefaultDuplicateWindow = 10 * time.Minute

	// DefaultArchiveEvery is the period of the scheduled archive. It is on
	// by default because the design keeps sent rows 7 days and then archives
	// them: a table that only grows slows the claim path, the stats query
	// and vacuum down, and fills the disk. The rows are moved, not deleted,
	// so turning it on loses nothing; see Config.ArchiveEvery for what it
	// does to an existing table.
	DefaultArchiveEvery = time.Hour
	// DefaultArchiveOlderThan is how long sent rows stay in the table: 7 days.
	DefaultArchiveOlderThan = 7 * 24 * time.Hour
	// DefaultArchiveBatch is how many rows one archive transaction moves.
	DefaultArchiveBatch = 1000
	// MaxArchiveBatch is the largest archive batch: the MySQL and SQLite
	// stores move at most this many rows per call.
	MaxArchiveBatch = 10_000
)

// EnvPrefix starts the name of every environment variable the daemon reads:
// OUTBOX_DB, OUTBOX_BATCH_SIZE, ...
const EnvPrefix = "OUTBOX_"

// Config is what `outbox relay` runs: the database, the brokers and routes,
// and the relay's settings. [Default] fills it with the defaults, [Load] reads
// it from a YAML file and the environment, and [Config.Validate] checks it.
// Scalar settings have a flag and an environment variable too (see
// [Settings]); the precedence is flag > environment > file > default.
//
// A Config is a plain value: not safe for concurrent modification, safe to
// read from several goroutines once built.
type Config struct {
	// DB is the database URL: postgres://, postgresql://, sqlite://PATH or
	// mysql://user:pass@host:3306/db. Required.
	DB Secret `yaml:"db"`
	// Table is the outbox table, "name" or "schema.name", each part letters,
	// digits and underscores as the database's store accepts them (lower
	// case on PostgreSQL). Default: DefaultTable.
	Table string `yaml:"table"`
	// CloudEventsSource is the source attribute of every CloudEvent the
	// relay sends (format: cloudevents). Default: "/outbox/" + Table.
	CloudEventsSource string `yaml:"cloudevents_source"`
	// DBMaxConns bounds the relay's own database pool. 0 means
	// ConnsPerRelay per relay loop plus SpareConns, or MaxInFlight per relay
	// loop plus SpareConns with HeldClaims (see PoolSize). Default: 0.
	DBMaxConns int `yaml:"db_max_conns"`

	// Broker is a shorthand for one broker named DefaultBrokerName that gets
	// every message: the same as a Brokers list of one. Exclusive with Brokers.
	Broker Secret `yaml:"broker"`
	// Brokers are the named destinations, each a URL plus options.
	Brokers []Broker `yaml:"brokers"`
	// Routes send messages to brokers by event type or aggregate type; the
	// first route that matches wins.
	Routes []Route `yaml:"routes"`
	// DefaultRoute takes what no route matched. Without it such a message is
	// marked dead with the reason "no route". Optional when there is one
	// broker and no routes: everything then goes to that broker.
	DefaultRoute *Route `yaml:"default_route"`

	// Relays is how many relay loops the process runs. Default: DefaultRelays.
	Relays int `yaml:"relays"`
	// BatchSize, when above 0, fixes how many rows one claim takes
	// (outbox.WithBatchSize). 0 lets each relay loop size its batches
	// between MinBatchSize and MaxBatchSize (outbox.WithBatchSizeRange).
	// Default: 0.
	BatchSize int `yaml:"batch_size"`
	// MinBatchSize and MaxBatchSize bound the batch size a relay loop
	// chooses when BatchSize is 0. Default: outbox.DefaultMinBatchSize and
	// outbox.DefaultMaxBatchSize.
	MinBatchSize int `yaml:"min_batch_size"`
	MaxBatchSize int `yaml:"max_batch_size"`
	// PollInterval is how long an idle relay waits. Default: outbox.DefaultPollInterval.
	PollInterval time.Duration `yaml:"poll_interval"`
	// MinPollInterval is the shortest wait between claims while messages
	// trickle in (adaptive polling). Default: outbox.DefaultMinPollInterval.
	MinPollInterval time.Duration `yaml:"min_poll_interval"`
	// MinInFlight and MaxInFlight bound how many claimed batches a relay
	// loop may have at the broker at once (pipelining); the loop chooses
	// within them (outbox.WithMaxInFlightRange), and equal bounds fix the
	// number. Default: outbox.DefaultMinInFlight and outbox.DefaultMaxInFlight.
	MinInFlight int `yaml:"min_in_flight"`
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxAttempts is how many attempts a message gets. Default: outbox.DefaultMaxAttempts.
	MaxAttempts int `yaml:"max_attempts"`
	// BackoffBase and BackoffCap shape the retry delay min(base × 2^(k-1), cap).
	// Default: outbox.DefaultBackoffBase and outbox.DefaultBackoffCap.
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffCap  time.Duration `yaml:"backoff_cap"`
	// PublishTimeout bounds one publish. Default: outbox.DefaultPublishTimeout.
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	// StoreTimeout bounds each database call of a relay (a claim, an
	// acknowledgement). Default: outbox.DefaultStoreTimeout.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// Lease is how long a claim reserves its rows. Default: outbox.DefaultLease.
	Lease time.Duration `yaml:"lease"`
	// ProbeInterval and MaxProbeInterval pace the probes of a destination that
	// is down. Default: outbox.DefaultProbeInterval, outbox.DefaultMaxProbeInterval.
	ProbeInterval    time.Duration `yaml:"probe_interval"`
	MaxProbeInterval time.Duration `yaml:"max_probe_interval"`
	// Notify makes each relay LISTEN for the NOTIFY that writers send when
	// they turn it on (pgstore.WithNotify), so messages go out at once
	// instead of at the next poll (postgres:// only). Default: false.
	Notify bool `yaml:"notify"`
	// NotifyTrigger makes `outbox migrate` install a statement-level AFTER
	// INSERT trigger on the table that sends the NOTIFY
	// (pgstore.WithNotifyTrigger), so that rows written by any program, in
	// any language, wake the relays at once. It implies Notify for the
	// relay: a relay with NotifyTrigger listens (pgstore's Listen listens
	// with either option), so setting both is allowed but not needed. The
	// trigger costs every writer of the table what NOTIFY costs (PostgreSQL
	// commits notifying transactions one at a time); migrate never removes
	// it (DROP TRIGGER outbox_notify ON the table to stop). postgres://
	// only. Default: false.
	NotifyTrigger bool `yaml:"notify_trigger"`
	// BatchLease makes each claim lease its batch with one row of a side
	// table (the table's name plus "_lease", created by `outbox migrate`
	// with BatchLease on) instead of an UPDATE of every claimed row
	// (pgstore.WithBatchLease): about half the database work per message
	// when sent rows are kept, a third when they are deleted. Every relay
	// on the table must use the same setting: a relay without it does not
	// see batch leases and could publish a leased row a second time.
	// postgres:// only. Default: false.
	BatchLease bool `yaml:"batch_lease"`
	// HeldClaims makes each unordered claim lock its rows in a transaction
	// that stays open while the relay publishes the batch, and settle the
	// batch in that transaction (pgstore.WithHeldClaims): one commit per
	// batch, each row written once. It needs no migration.
	// What it costs: a relay holds a connection and an open transaction per
	// batch in flight for as long as the publish takes (the automatic pool
	// size, PoolSize, allows for it), and an attempt that never finished (the
	// relay or its connection died first) is not counted, so a message that
	// crashes the relay every time is never marked dead. Ordered claims
	// ignore it. Exclusive with BatchLease. postgres:// only. Default: false.
	HeldClaims bool `yaml:"held_claims"`
	// AsyncCommit makes the relay's own statements (claim, ack, reschedule,
	// kill) commit with synchronous_commit = off for their transaction
	// (pgstore.WithAsyncCommit): no wait for the disk, 1.5 to 2 times faster
	// with batches of 100. A crash of the PostgreSQL server (not of the relay)
	// can then lose the relay's last statements: rows published again
	// (duplicates beyond the batch in flight) or an attempt not counted,
	// never a message. postgres:// only. Default: false.
	AsyncCommit bool `yaml:"async_commit"`
	// Source is where the relay finds messages: SourcePolling (claim rows
	// from the table) or SourceCDC (read committed inserts from PostgreSQL's
	// logical replication; postgres:// only). Default: DefaultSource.
	Source string `yaml:"source"`
	// CDCSlot is the logical replication slot of source cdc, created by
	// `outbox migrate --cdc`. Default: "" (pgcdc.SlotName of the table,
	// outbox_<table>).
	CDCSlot string `yaml:"cdc_slot"`
	// CDCPublication is the publication of source cdc, created by `outbox
	// migrate --cdc`. Default: "" (pgcdc.PublicationName of the table,
	// outbox_<table>_pub).
	CDCPublication string `yaml:"cdc_publication"`
	// CDCFailoverAfter is how long a CDC relay may be unable to stream
	// before it polls the table instead. Default: DefaultCDCFailoverAfter.
	CDCFailoverAfter time.Duration `yaml:"cdc_failover_after"`
	// CDCMemoryAttempts makes a CDC relay count attempts in memory instead
	// of in the table's retry_count at each claim (pgcdc.WithTableAttempts
	// off): a faster drain of kept rows, but after a restart a message starts
	// again at attempt 1, so one that crashes the relay every time is never
	// marked dead. Default: false.
	CDCMemoryAttempts bool `yaml:"cdc_memory_attempts"`
	// Columns maps the table contract's columns to the names of a table
	// whose columns are called otherwise (pgcdc.WithColumns), e.g. the
	// table of Debezium's outbox event router: {message_id: id,
	// aggregate_type: aggregatetype, aggregate_id: aggregateid, event_type:
	// type, payload: payload}. The relay then reads only the mapped columns.
	// The message columns are required; the state columns (id, status,
	// retry_count, next_retry_at, created_at, updated_at) are mapped all or
	// none; without them (created_at alone may be mapped) the table is
	// log-only: read from the log, never written, dead messages go to
	// CDCDeadTable (source cdc only). File only (a map). A mapping that
	// keeps the state columns is also polled (the stores' WithColumns), with
	// source polling on PostgreSQL, MySQL/MariaDB and SQLite, or as the
	// fallback of source cdc; with it batch_lease and notify_trigger are
	// refused (not available yet). A mapped column the table lacks stops
	// the start with the mapping and the table's columns. The scheduled archive is off for a log-only
	// table. Default: none.
	Columns map[string]string `yaml:"columns,omitempty"`
	// CDCDeadTable is the table, in the contract's own layout, where the
	// messages of a log-only table (Columns without state columns) that fail
	// for good are recorded dead; the daemon creates it at start when it is
	// missing (as outbox migrate --table would). Default: "" (the table's
	// name and "_dead").
	CDCDeadTable string `yaml:"cdc_dead_table"`
	// DeleteSent deletes published rows instead of marking them sent. Default: false.
	DeleteSent bool `yaml:"delete_sent"`
	// ArchiveEvery is the period of the scheduled archive: the daemon takes
	// sent rows last updated at least ArchiveOlderThan ago out of the table
	// (Admin.Archive), ArchiveBatch rows per short transaction, a first time
	// a minute after it starts (or after ArchiveEvery, when that is shorter)
	// and then ArchiveEvery after each run ends. The rows go to the archive
	// table, the table's name plus "_archive" in the same schema, which the
	// first run creates with the table's columns (so the relay's database
	// user needs CREATE there); outbox never reads it, so prune it as your
	// retention says. 0 turns the scheduled archive off; it is off with
	// DeleteSent too, which leaves no sent rows to archive (the daemon says
	// so in its log rather than refusing, since the default is on). Default:
	// DefaultArchiveEvery.
	ArchiveEvery time.Duration `yaml:"archive_every"`
	// ArchiveOlderThan is how long a sent row stays in the table before the
	// scheduled archive takes it; 0 takes every sent row. Default:
	// DefaultArchiveOlderThan (7 days).
	ArchiveOlderThan time.Duration `yaml:"archive_older_than"`
	// ArchiveBatch is how many rows one archive transaction takes, between 1
	// and MaxArchiveBatch. Default: DefaultArchiveBatch.
	ArchiveBatch int `yaml:"archive_batch"`
	// ArchiveDelete makes the scheduled archive delete the rows instead of
	// moving them, and creates no archive table. Default: false.
	ArchiveDelete bool `yaml:"archive_delete"`
	// Ordering keeps each aggregate's messages in order (outbox.WithOrdering).
	// Default: true.
	Ordering bool `yaml:"ordering"`
	// DeadPolicy is "block" or "skip": what ordered delivery does with an
	// aggregate whose head message is dead. Default: DefaultDeadPolicy.
	DeadPolicy string `yaml:"dead_policy"`
	// RelayTTL is how long an ordered relay counts as live in the table of
	// relays after its last heartbeat; the relays use it to share the
	// aggregates out as slots (outbox.WithRelayTTL). 0 turns it off.
	// Default: outbox.DefaultRelayTTL.
	RelayTTL time.Duration `yaml:"relay_ttl"`
	// MaxPayload is the largest payload the relay sends, in bytes; 0 means no
	// limit. Default: outbox.DefaultMaxPayloadSize.
	MaxPayload int `yaml:"max_payload"`

	// LogLevel is debug, info, warn or error. Default: DefaultLogLevel.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json. Default: DefaultLogFormat.
	LogFormat string `yaml:"log_format"`
	// Name names the relay process in logs (its loops are Name-1, Name-2,
	// ...) and in the relay label of its metrics. Default: DefaultName.
	Name string `yaml:"name"`
	// HTTP is the address of the HTTP server (/metrics, /healthz, /readyz),
	// a host and a port such as "127.0.0.1:9090" (":9090" listens on every
	// interface); empty means none (and no metrics). Default: "".
	HTTP string `yaml:"http"`
	// ReadyzDetails makes /readyz show each failed check's error, not only
	// its name: driver and broker errors can name users, databases and
	// internal hosts. Default: false.
	ReadyzDetails bool `yaml:"readyz_details"`
	// StatsInterval is how often the table's backlog is read for the
	// metrics (only with HTTP). Default: DefaultStatsInterval.
	StatsInterval time.Duration `yaml:"stats_interval"`
	// TraceExporter sends a span per publish: none, stdout or otlp (see
	// package tracing). Default: DefaultTraceExporter.
	TraceExporter string `yaml:"trace_exporter"`
	// TraceEndpoint is the OTLP/HTTP collector URL (otlp only); empty means
	// the OTEL_EXPORTER_OTLP_* variables, else http://localhost:4318.
	// Default: "".
	TraceEndpoint string `yaml:"trace_endpoint"`
}

// Broker is one named destination.
type Broker struct {
	// Name is how routes refer to the broker. Required, unique.
	Name string `yaml:"name"`
	// URL says which broker: nats://, kafka://, amqp://, amqps://, redis://,
	// rediss://, http://, https://, mqtt:// or mqtts://. Required. A webhook
	// URL may hold {destination} in its path (not its host or query),
	// replaced by each message's destination; a destination that is empty,
	// "." or "..", or holds a slash, kills its message.
	URL Secret `yaml:"url"`
	// Prefix is put before each message's destination to make the NATS
	// subject, Kafka topic, AMQP routing key, Redis stream key or MQTT
	// topic. Default: DefaultNATSPrefix for nats://, "" for the others. Not
	// for webhooks.
	Prefix *string `yaml:"prefix"`

	// Stream is the JetStream stream the daemon creates or updates (nats://
	// only). Default: DefaultNATSStream.
	Stream string `yaml:"stream"`
	// Subjects are the stream's subjects (nats:// only). Default: the prefix
	// followed by ">".
	Subjects []string `yaml:"subjects"`
	// DuplicateWindow is the stream's duplicate window (nats:// only).
	// Default: DefaultDuplicateWindow.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`

	// Exchange is the AMQP exchange to publish to (amqp:// and amqps://
	// only). Default: "" (the default exchange, routing key = queue name).
	Exchange string `yaml:"exchange"`

	// MaxLen trims each Redis stream to about this many entries (redis://
	// and rediss:// only); 0 means no trimming. Default: 0.
	MaxLen int64 `yaml:"max_len"`
	// DedupTTL turns on publish-side dedup for this long: a re-sent message
	// id adds no second stream entry (redis:// and rediss:// only). Pick
	// more than lease plus backoff cap. Default: 0, off.
	DedupTTL time.Duration `yaml:"dedup_ttl"`

	// Secret signs webhook requests (http:// and https:// only): "whsec_"
	// and the base64 of the key, or the key itself; the key must have 16
	// bytes or more. Optional.
	Secret Secret `yaml:"secret"`
	// Concurrency bounds the requests in flight of a webhook broker
	// (http:// and https:// only); 0 means the publisher's default.
	Concurrency int `yaml:"concurrency"`
	// Batch POSTs JSON arrays of up to this many messages instead of one
	// request per message (http:// and https:// only). Default: 0 (one each).
	Batch int `yaml:"batch"`
	// Headers are added to every webhook request, e.g. an API key (http://
	// and https:// only). Their values are secrets. Default: none.
	Headers map[string]Secret `yaml:"headers"`
	// PermanentStatus lists the HTTP status codes (300 to 599) that make a
	// webhook message dead at once; any other refusal is retried with
	// backoff up to max_attempts (http:// and https:// only). An empty list
	// retries every refusal. Redirects are never followed, so a 3xx is
	// retried unless listed. Default: every 4xx but 401, 403, 404, 408 and
	// 429 (a rotated key or a route not deployed yet is retried).
	PermanentStatus []int `yaml:"permanent_status"`

	// Format is how messages go on the wire: "outbox" (the publisher's own
	// layout, see docs/formats.md) or "cloudevents" (CloudEvents 1.0, see
	// publisher/cepub), one event per webhook request (so not with batch).
	// A route may choose its own. Default: "outbox".
	Format string `yaml:"format"`
	// CloudEventsMode is "binary" (attributes in the binding's headers) or
	// "structured" (an application/cloudevents+json payload) for format
	// cloudevents. Binary needs headers: not on redis:// or mqtt:// (MQTT
	// 3.1.1). Default: binary, structured for redis:// and mqtt://.
	CloudEventsMode string `yaml:"cloudevents_mode"`
}

// Route sends matching messages to a broker.
type Route struct {
	// EventType matches the message's event type: exact, or a pattern with
	// * and ? (path.Match syntax, e.g. "ORDER_*"). Empty matches any.
	EventType string `yaml:"event_type"`
	// AggregateType matches the aggregate type the same way. Empty matches any.
	AggregateType string `yaml:"aggregate_type"`
	// Broker is the name of the destination. Required.
	Broker string `yaml:"broker"`
	// Topic is a text/template over the message (e.g. "orders.{{.EventType}}"
	// or "{{lower .AggregateType}}.{{.EventType}}"; see publisher/router for
	// the fields and functions) giving its topic; empty keeps the message's
	// own destination. The daemon checks it when it starts.
	Topic string `yaml:"topic"`
	// Unroutable is what happens to a message of this route that the broker
	// has no destination for yet (RabbitMQ: no queue bound to its routing
	// key, 312 NO_ROUTE; NATS: no stream for its subject; Kafka: an unknown
	// topic): "retry" (default) tries it again, so a destination made in the
	// meantime (its consumer was being deployed) receives it: RabbitMQ with
	// backoff up to max_attempts, NATS and Kafka as in a broker outage
	// (attempts given back, the relay pauses and probes); "dead" marks it
	// dead at its first attempt.
	Unroutable string `yaml:"unroutable"`
	// Format overrides the broker's format ("outbox" or "cloudevents") for
	// this route's messages. A webhook or MQTT broker sends one format:
	// give a route with another one a broker entry of its own (the same
	// URL). Default: the broker's.
	Format string `yaml:"format"`
	// CloudEventsMode overrides the broker's cloudevents_mode ("binary" or
	// "structured") for this route's messages. Default: the broker's.
	CloudEventsMode string `yaml:"cloudevents_mode"`
}

// UnroutableDead reports whether the route marks an unroutable message dead
// at once (unroutable: dead).
func (r *Route) UnroutableDead() bool { return r.Unroutable == UnroutableDead }

// Default returns a Config holding every default and no database or broker.
func Default() *Config {
	return &Config{
		Table:            DefaultTable,
		Source:           DefaultSource,
		CDCFailoverAfter: DefaultCDCFailoverAfter,
		Ordering:         true,
		RelayTTL:         outbox.DefaultRelayTTL,
		Relays:           DefaultRelays,
		MinBatchSize:     outbox.DefaultMinBatchSize,
		MaxBatchSize:     outbox.DefaultMaxBatchSize,
		PollInterval:     outbox.DefaultPollInterval,
		MinPollInterval:  outbox.DefaultMinPollInterval,
		MinInFlight:      outbox.DefaultMinInFlight,
		MaxInFlight:      outbox.DefaultMaxInFlight,
		MaxAttempts:      outbox.DefaultMaxAttempts,
		BackoffBase:      outbox.DefaultBackoffBase,
		BackoffCap:       outbox.DefaultBackoffCap,
		PublishTimeout:   outbox.DefaultPublishTimeout,
		StoreTimeout:     outbox.DefaultStoreTimeout,
		Lease:            outbox.DefaultLease,
		ProbeInterval:    outbox.DefaultProbeInterval,
		MaxProbeInterval: outbox.DefaultMaxProbeInterval,
		DeadPolicy:       DefaultDeadPolicy,
		ArchiveEvery:     DefaultArchiveEvery,
		ArchiveOlderThan: DefaultArchiveOlderThan,
		ArchiveBatch:     DefaultArchiveBatch,
		MaxPayload:       outbox.DefaultMaxPayloadSize,
		LogLevel:         DefaultLogLevel,
		LogFormat:        DefaultLogFormat,
		Name:             DefaultName,
		StatsInterval:    DefaultStatsInterval,
		TraceExporter:    DefaultTraceExporter,
	}
}

// Load reads the YAML file at path over the defaults, strictly (an unknown
// key, a wrong type or a second document is an error naming its line), then
// applies the OUTBOX_* environment variables (see [Settings]). An empty path
// means no file: defaults and environment only. Load does not validate; call
// [Config.Validate].
func Load(path string) (*Config, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
	}
	return load(path, data, os.LookupEnv)
}

// load is Load on data already read, with the environment given by lookup.
func load(path string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	c, err := Parse(data)
	if err != nil {
		if path != "" {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		return nil, err
	}
	if err := c.ApplyEnv(lookup); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse decodes a YAML document over the defaults, strictly: an unknown key,
// a value of the wrong type, or more than one document is an error naming
// the line and key. Empty input gives the defaults. Parse reads no
// environment variable and does not validate.
func Parse(data []byte) (*Config, error) {
	c := Default()
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("the config is %d bytes, more than %d", len(data), maxConfigBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		return nil, yamlError(err, nil)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err, nil)
		}
		return nil, fmt.Errorf("line %d: a second YAML document; the config is one document", extra.Line)
	}
	if len(doc.Content) == 0 { // a document holding only comments
		return c, nil
	}
	if root := doc.Content[0]; root.Kind != yaml.MappingNode {
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			return c, nil
		}
		return nil, fmt.Errorf("line %d: the config must be a map of keys, found a %s", root.Line, kindName(root.Kind))
	}
	if err := checkShape(&doc); err != nil {
		return nil, err
	}
	// Decode the text again with KnownFields: Node.Decode does not check keys.
	// Durations written with days are first put in the form the decoder reads.
	strict := yaml.NewDecoder(bytes.NewReader(expandDays(data, &doc, reflect.TypeFor[Config]())))
	strict.KnownFields(true)
	if err := strict.Decode(c); err != nil {
		return nil, yamlError(err, keysByLine(&doc))
	}
	return c, nil
}

// Bounds of a config document. A real config is a few kilobytes; the
// bounds keep a hostile or broken file from making the decoder work
// quadratically (it compares every key of a map with every other).
const (
	maxConfigBytes = 1 << 20
	maxMapKeys     = 1000
)

// checkShape rejects a map with too many keys or a key written twice, naming
// the line, before the strict decode.
func checkShape(doc *yaml.Node) error {
	var err error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if err != nil {
			return
		}
		if n.Kind == yaml.MappingNode {
			if len(n.Content)/2 > maxMapKeys {
				err = fmt.Errorf("line %d: a map of %d keys, more than %d", n.Line, len(n.Content)/2, maxMapKeys)
				return
			}
			seen := make(map[string]int, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.Kind != yaml.ScalarNode {
					continue
				}
				if first, ok := seen[k.Value]; ok {
					err = fmt.Errorf("line %d: key %q is repeated (first on line %d)", k.Line, k.Value, first)
					return
				}
				seen[k.Value] = k.Line
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(doc)
	return err
}

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type [\w.]+$`)
	lineError    = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// yamlError turns the decoder's errors into one line each, joined with "; ",
// naming the key at each line when lines knows it.
func yamlError(err error, lines *keyLines) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		if m := unknownField.FindStringSubmatch(e); m != nil {
			key := m[2]
			if line, _ := strconv.Atoi(m[1]); lines != nil && lines.key[line] != "" {
				key = lines.key[line]
			}
			msgs = append(msgs, fmt.Sprintf("line %s: unknown key %q", m[1], key))
			continue
		}
		if m := lineError.FindStringSubmatch(e); m != nil && lines != nil {
			line, _ := strconv.Atoi(m[1])
			collection := strings.Contains(m[2], "!!map") || strings.Contains(m[2], "!!seq")
			if k := lines.value(line, collection); k != "" {
				msgs = append(msgs, fmt.Sprintf("line %s: %s: %s", m[1], k, typeMismatch(m[2])))
				continue
			}
		}
		msgs = append(msgs, e)
	}
	return errors.New(strings.Join(msgs, "; "))
}

var cannotUnmarshal = regexp.MustCompile("^cannot unmarshal !!(\\w+) (?:`(.*)` )?into (.+)$")

// typeMismatch rewrites the decoder's "cannot unmarshal !!str `x` into int"
// in the config's terms: `"x" is not a whole number`.
func typeMismatch(msg string) string {
	m := cannotUnmarshal.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	var want string
	switch m[3] {
	case "int", "int64":
		want = "a whole number"
	case "time.Duration":
		want = "a duration with a unit (500ms, 5s, 1m30s)"
	case "bool":
		want = "true or false"
	case "string":
		want = "a string"
	case "[]string":
		want = "a list of strings"
	case "[]config.Broker":
		want = "a list of brokers"
	case "[]config.Route":
		want = "a list of routes"
	case "config.Broker", "config.Route":
		want = "a map of keys"
	default:
		return msg
	}
	found := map[string]string{"seq": "a list", "map": "a map", "null": "nothing"}[m[1]]
	if m[2] != "" {
		return fmt.Sprintf("%q is not %s", m[2], want)
	}
	if found == "" {
		found = "a " + m[1]
	}
	return fmt.Sprintf("expected %s, found %s", want, found)
}

// keyLines maps lines of a YAML document to the dotted paths of the keys
// (brokers[1].url) written there, so decoding errors can name them.
type keyLines struct {
	key    map[int]string // the key written on the line
	nested map[int]string // the key whose map or list value starts on the line
}

// value names the key whose value is at line: for a map or list value the
// key whose value starts there, for a scalar the key written there.
func (l *keyLines) value(line int, collection bool) string {
	if k, ok := l.nested[line]; ok && (collection || l.key[line] == "") {
		return k
	}
	return l.key[line]
}

func keysByLine(doc *yaml.Node) *keyLines {
	l := &keyLines{key: make(map[int]string), nested: make(map[int]string)}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n.Kind != yaml.ScalarNode && path != "" {
			if _, seen := l.nested[n.Line]; !seen {
				l.nested[n.Line] = path
			}
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if _, seen := l.key[k.Line]; !seen {
					l.key[k.Line] = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if _, seen := l.key[c.Line]; !seen && c.Kind == yaml.ScalarNode {
					l.key[c.Line] = p
				}
				walk(c, p)
			}
		}
	}
	walk(doc, "")
	return l
}

// BatchSizes returns the bounds of a relay loop's batch size: BatchSize
// twice when it is set, else MinBatchSize and MaxBatchSize.
func (c *Config) BatchSizes() (lo, hi int) {
	if c.BatchSize > 0 {
		return c.BatchSize, c.BatchSize
	}
	return c.MinBatchSize, c.MaxBatchSize
}

// PoolSize is the database pool's bound: DBMaxConns when set, else
// ConnsPerRelay per relay loop plus SpareConns. With HeldClaims (and no
// ordering, whose claims are not held) a loop holds a connection per batch in
// flight while the batch is published, so each loop gets MaxInFlight
// connections instead.
func (c *Config) PoolSize() int {
	if c.DBMaxConns > 0 {
		return c.DBMaxConns
	}
	perRelay := ConnsPerRelay
	if c.HeldClaims && !c.Ordering {
		perRelay = max(perRelay, c.MaxInFlight)
	}
	return perRelay*max(c.Relays, 1) + SpareConns
}

// ArchiveScheduled says whether `outbox relay` archives on a schedule:
// ArchiveEvery is set and the relay keeps sent rows (not DeleteSent) in a
// table it writes to (not LogOnly).
func (c *Config) ArchiveScheduled() bool {
	return c.ArchiveEvery > 0 && !c.DeleteSent && !c.LogOnly()
}

// LogOnly reports whether Columns maps a log-only table (no state columns):
// read from the log, never written to.
func (c *Config) LogOnly() bool { return colmap.Map(c.Columns).LogOnly() }

// CDCDeadTableName is the dead table of a log-only table: CDCDeadTable, or
// the table's name and "_dead".
func (c *Config) CDCDeadTableName() string { return cmp.Or(c.CDCDeadTable, c.Table+"_dead") }

// EffectiveBrokers returns the brokers the config names: Brokers, or the one
// broker of the Broker shorthand.
func (c *Config) EffectiveBrokers() []Broker {
	if !c.Broker.IsZero() {
		return []Broker{{Name: DefaultBrokerName, URL: c.Broker}}
	}
	return c.Brokers
}

// EffectiveDefaultRoute returns DefaultRoute, or, when the config names one
// broker and has no routes, a default route to that broker; else nil.
func (c *Config) EffectiveDefaultRoute() *Route {
	if c.DefaultRoute != nil {
		return c.DefaultRoute
	}
	if b := c.EffectiveBrokers(); len(b) == 1 && len(c.Routes) == 0 {
		return &Route{Broker: b[0].Name}
	}
	return nil
}

// Message formats and CloudEvents modes of brokers and routes.
const (
	FormatOutbox          = "outbox"
	FormatCloudEvents     = "cloudevents"
	CloudEventsBinary     = "binary"
	CloudEventsStructured = "structured"
)

// EffectiveCloudEventsSource returns CloudEventsSource, or "/outbox/" and
// the table.
func (c *Config) EffectiveCloudEventsSource() string {
	if c.CloudEventsSource != "" {
		return c.CloudEventsSource
	}
	return "/outbox/" + c.Table
}

// CloudEventsBinding returns the CloudEvents protocol binding of a broker
// URL scheme: cepub.None for redis and for an unknown scheme.
func CloudEventsBinding(scheme string) cepub.Binding {
	switch scheme {
	case "http", "https":
		return cepub.HTTP
	case "kafka":
		return cepub.Kafka
	case "amqp", "amqps":
		return cepub.AMQP
	case "nats":
		return cepub.NATS
	case "mqtt", "mqtts":
		return cepub.MQTT
	}
	return cepub.None
}

// Output is how one route's messages go on the wire: a format and, for
// CloudEvents, a mode.
type Output struct {
	Format string // FormatOutbox or FormatCloudEvents
	Mode   string // CloudEventsBinary or CloudEventsStructured; "" with FormatOutbox
}

// RouteOutput returns the format and mode of route r's messages on broker
// b: the route's own, else the broker's, else the defaults (outbox;
// binary where the broker's binding has it, else structured).
func RouteOutput(r *Route, b *Broker) Output {
	o := Output{Format: cmp.Or(r.Format, b.Format, FormatOutbox)}
	if o.Format != FormatCloudEvents {
		return o
	}
	def := CloudEventsStructured
	if CloudEventsBinding(b.URL.Scheme()).Binary() {
		def = CloudEventsBinary
	}
	o.Mode = cmp.Or(r.CloudEventsMode, b.CloudEventsMode, def)
	return o
}

// EffectivePrefix returns the broker's Prefix, or its scheme's default.
func (b *Broker) EffectivePrefix() string {
	if b.Prefix != nil {
		return *b.Prefix
	}
	if b.URL.Scheme() == "nats" {
		return DefaultNATSPrefix
	}
	return ""
}

// EffectiveStream returns the NATS stream name, or DefaultNATSStream.
func (b *Broker) EffectiveStream() string {
	if b.Stream != "" {
		return b.Stream
	}
	return DefaultNATSStream
}

// EffectiveSubjects returns the NATS stream's subjects: Subjects, or the
// prefix followed by ">" (nil when the prefix is empty too).
func (b *Broker) EffectiveSubjects() []string {
	if len(b.Subjects) > 0 {
		return b.Subjects
	}
	if p := b.EffectivePrefix(); p != "" {
		return []string{p + ">"}
	}
	return nil
}

// EffectiveDuplicateWindow returns the NATS duplicate window, or DefaultDuplicateWindow.
func (b *Broker) EffectiveDuplicateWindow() time.Duration {
	if b.DuplicateWindow > 0 {
		return b.DuplicateWindow
	}
	return DefaultDuplicateWindow
}
