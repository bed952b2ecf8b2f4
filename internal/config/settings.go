package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Setting is one scalar setting, known by three names: a YAML key
// (batch_size), a command-line flag (--batch-size) and an environment
// variable (OUTBOX_BATCH_SIZE).
type Setting struct {
	// Key is the YAML key.
	Key string
	// Flag is the flag's name, without dashes.
	Flag string
	// Env is the environment variable.
	Env string
	// Usage is one line for --help. A word in backquotes names the value,
	// as in the standard flag package ("claim up to `N` rows").
	Usage string
	// Default is the default value as text.
	Default string
	// Bool says the setting is a switch (--delete-sent), not a value.
	Bool bool
}

// field binds a Setting to the Config field it sets.
type field struct {
	Setting
	ptr func(*Config) any // *string, *Secret, *int, *time.Duration or *bool
}

var fields = []field{
	{Setting{Key: "db", Usage: "database `URL`: postgres://, sqlite://PATH or mysql://user:pass@host:3306/db (the daemon adds readTimeout=1m, writeTimeout=30s and timeout=10s to a mysql:// URL that names none)"},
		func(c *Config) any { return &c.DB }},
	{Setting{Key: "table", Usage: "the outbox table's `NAME` (name or schema.name; lower case on PostgreSQL)"},
		func(c *Config) any { return &c.Table }},
	{Setting{Key: "cloudevents_source", Usage: "the source `URI` of the CloudEvents the relay sends (format: cloudevents); default /outbox/ and the table"},
		func(c *Config) any { return &c.CloudEventsSource }},
	{Setting{Key: "db_max_conns", Usage: fmt.Sprintf("open at most `N` database connections; 0 = %d per relay loop (max_in_flight with held_claims) + %d", ConnsPerRelay, SpareConns)},
		func(c *Config) any { return &c.DBMaxConns }},
	{Setting{Key: "broker", Usage: "broker `URL` (nats://, kafka://, amqp://, redis://, http(s)://, mqtt://) that gets every message; the config file can name several"},
		func(c *Config) any { return &c.Broker }},
	{Setting{Key: "relays", Usage: "run `N` relay loops in this process"},
		func(c *Config) any { return &c.Relays }},
	{Setting{Key: "batch_size", Usage: "claim up to `N` rows at a time, always; 0 = let the relay size its batches between min_batch_size and max_batch_size"},
		func(c *Config) any { return &c.BatchSize }},
	{Setting{Key: "min_batch_size", Usage: "with batch_size 0, let a claim take up to at least `N` rows even while messages trickle in"},
		func(c *Config) any { return &c.MinBatchSize }},
	{Setting{Key: "max_batch_size", Usage: "with batch_size 0, claim at most `N` rows at a time (a backlog); times max_in_flight, it bounds what a crash publishes again"},
		func(c *Config) any { return &c.MaxBatchSize }},
	{Setting{Key: "poll_interval", Usage: "wait `DURATION` before an idle relay looks again"},
		func(c *Config) any { return &c.PollInterval }},
	{Setting{Key: "min_poll_interval", Usage: "wait at least `DURATION` between claims while messages trickle in, a quarter of the time since rows last came while none come"},
		func(c *Config) any { return &c.MinPollInterval }},
	{Setting{Key: "min_in_flight", Usage: "always let a relay loop have up to `N` claimed batches at the broker at once; equal to max_in_flight, the number is fixed"},
		func(c *Config) any { return &c.MinInFlight }},
	{Setting{Key: "max_in_flight", Usage: "let a relay loop have up to `N` claimed batches at the broker at once, more while a backlog drains and the broker is the bottleneck"},
		func(c *Config) any { return &c.MaxInFlight }},
	{Setting{Key: "max_attempts", Usage: "give a message `N` delivery attempts before it is dead"},
		func(c *Config) any { return &c.MaxAttempts }},
	{Setting{Key: "backoff_base", Usage: "wait `DURATION` to retry after a first failure, doubling after each"},
		func(c *Config) any { return &c.BackoffBase }},
	{Setting{Key: "backoff_cap", Usage: "wait at most `DURATION` between retries"},
		func(c *Config) any { return &c.BackoffCap }},
	{Setting{Key: "publish_timeout", Usage: "give one publish (and a graceful stop) at most `DURATION`"},
		func(c *Config) any { return &c.PublishTimeout }},
	{Setting{Key: "store_timeout", Usage: "give each database call of a relay (a claim, an acknowledgement) at most `DURATION`; one that runs out is logged as a warning and tried again"},
		func(c *Config) any { return &c.StoreTimeout }},
	{Setting{Key: "lease", Usage: "reserve claimed rows for `DURATION` (with held_claims: how long a claim's transaction may sit idle); at least twice the publish timeout"},
		func(c *Config) any { return &c.Lease }},
	{Setting{Key: "probe_interval", Usage: "pause `DURATION` when a destination is down as a whole, doubling while it stays down"},
		func(c *Config) any { return &c.ProbeInterval }},
	{Setting{Key: "max_probe_interval", Usage: "pause at most `DURATION` while a destination stays down"},
		func(c *Config) any { return &c.MaxProbeInterval }},
	{Setting{Key: "notify", Usage: "postgres only: wake at once on the NOTIFY of writers that send it (pgstore.WithNotify)", Bool: true},
		func(c *Config) any { return &c.Notify }},
	{Setting{Key: "notify_trigger", Usage: "postgres only: migrate installs a NOTIFY trigger so that any writer's INSERT wakes the relay; the relay listens (implies notify) (pgstore.WithNotifyTrigger)", Bool: true},
		func(c *Config) any { return &c.NotifyTrigger }},
	{Setting{Key: "batch_lease", Usage: "postgres only: lease each batch with one row of TABLE_lease (created by migrate with it) instead of updating every claimed row; every relay on the table must use it (pgstore.WithBatchLease)", Bool: true},
		func(c *Config) any { return &c.BatchLease }},
	{Setting{Key: "held_claims", Usage: "postgres only: lock each batch in a transaction held open while it is published, and settle it there; costs a connection per batch in flight; not with batch_lease; needs ordering: false (pgstore.WithHeldClaims)", Bool: true},
		func(c *Config) any { return &c.HeldClaims }},
	{Setting{Key: "async_commit", Usage: "postgres only: the relay's statements commit with synchronous_commit = off; a database crash can cost duplicates, never a message (pgstore.WithAsyncCommit)", Bool: true},
		func(c *Config) any { return &c.AsyncCommit }},
	{Setting{Key: "source", Usage: "where the relay finds messages: `SOURCE` polling (claim from the table) or cdc (postgres only: the table's inserts from the write-ahead log, polling while it cannot be read; docs/cdc.md)"},
		func(c *Config) any { return &c.Source }},
	{Setting{Key: "cdc_slot", Usage: "source cdc: the replication slot's `NAME`; empty = outbox_ and the table's name"},
		func(c *Config) any { return &c.CDCSlot }},
	{Setting{Key: "cdc_publication", Usage: "source cdc: the publication's `NAME`; empty = the default slot name and _pub"},
		func(c *Config) any { return &c.CDCPublication }},
	{Setting{Key: "cdc_failover_after", Usage: "source cdc: poll the table after `DURATION` without streaming, until streaming works again"},
		func(c *Config) any { return &c.CDCFailoverAfter }},
	{Setting{Key: "cdc_memory_attempts", Usage: "source cdc: count attempts in memory instead of in the table at each claim (faster with kept rows; a message that crashes the relay every time is then never marked dead; pgcdc.WithTableAttempts)", Bool: true},
		func(c *Config) any { return &c.CDCMemoryAttempts }},
	{Setting{Key: "cdc_dead_table", Usage: "source cdc with a log-only columns: mapping: the `TABLE` (contract layout, created at start) for messages that fail for good; empty = the table's name and _dead"},
		func(c *Config) any { return &c.CDCDeadTable }},
	{Setting{Key: "delete_sent", Usage: "delete published rows instead of marking them sent", Bool: true},
		func(c *Config) any { return &c.DeleteSent }},
	{Setting{Key: "archive_every", Usage: "take old sent rows out of the table every `DURATION` (into TABLE_archive, created on first use); 0 = off; off with delete_sent"},
		func(c *Config) any { return &c.ArchiveEvery }},
	{Setting{Key: "archive_older_than", Usage: "archive sent rows last updated at least `DURATION` ago (36h, 7d; 0s = all)"},
		func(c *Config) any { return &c.ArchiveOlderThan }},
	{Setting{Key: "archive_batch", Usage: fmt.Sprintf("archive `N` rows per short transaction (at most %d)", MaxArchiveBatch)},
		func(c *Config) any { return &c.ArchiveBatch }},
	{Setting{Key: "archive_delete", Usage: "delete old sent rows instead of moving them to the archive table", Bool: true},
		func(c *Config) any { return &c.ArchiveDelete }},
	{Setting{Key: "ordering", Usage: "keep each aggregate's messages in order; on by default (--ordering=false: off, for the last bit of throughput)", Bool: true},
		func(c *Config) any { return &c.Ordering }},
	{Setting{Key: "dead_policy", Usage: "with ordering, `POLICY` for the messages behind a dead one: block or skip"},
		func(c *Config) any { return &c.DeadPolicy }},
	{Setting{Key: "relay_ttl", Usage: "with ordering, count a relay as live for `DURATION` after its last heartbeat in TABLE_relays, where the relays share the aggregates out as slots; 0 = no slots"},
		func(c *Config) any { return &c.RelayTTL }},
	{Setting{Key: "max_payload", Usage: "send payloads of at most `BYTES` bytes; 0 = no limit"},
		func(c *Config) any { return &c.MaxPayload }},
	{Setting{Key: "log_level", Usage: "log at `LEVEL`: debug, info, warn or error"},
		func(c *Config) any { return &c.LogLevel }},
	{Setting{Key: "log_format", Usage: "log in `FORMAT`: text or json"},
		func(c *Config) any { return &c.LogFormat }},
	{Setting{Key: "name", Usage: "`NAME` of this relay in logs and in the relay label of its metrics"},
		func(c *Config) any { return &c.Name }},
	{Setting{Key: "http", Usage: "serve /metrics, /healthz and /readyz on this `ADDRESS` (e.g. 127.0.0.1:9090); empty = off"},
		func(c *Config) any { return &c.HTTP }},
	{Setting{Key: "readyz_details", Usage: "show why each failed check failed in /readyz (driver errors can name users, databases and hosts)", Bool: true},
		func(c *Config) any { return &c.ReadyzDetails }},
	{Setting{Key: "stats_interval", Usage: "read the table's backlog for /metrics every `DURATION`"},
		func(c *Config) any { return &c.StatsInterval }},
	{Setting{Key: "trace_exporter", Usage: "send a span per publish to `EXPORTER`: none, stdout or otlp"},
		func(c *Config) any { return &c.TraceExporter }},
	{Setting{Key: "trace_endpoint", Usage: "OTLP/HTTP collector `URL` (otlp); empty = OTEL_EXPORTER_OTLP_* or http://localhost:4318"},
		func(c *Config) any { return &c.TraceEndpoint }},
}

func init() {
	def := Default()
	for i := range fields {
		f := &fields[i]
		f.Flag = strings.ReplaceAll(f.Key, "_", "-")
		f.Env = EnvPrefix + strings.ToUpper(f.Key)
		f.Default = format(f.ptr(def))
	}
}

// Settings returns every scalar setting, in the order --help lists them. The
// slice is a copy.
func Settings() []Setting {
	out := make([]Setting, len(fields))
	for i, f := range fields {
		out[i] = f.Setting
	}
	return out
}

// Set sets the setting with YAML key key from its text form, as written in a
// flag or environment variable: durations like "1500ms" or "7d" (see
// [ParseDuration]), whole numbers, booleans (true, false, 1, 0). The error
// says what is wrong with the value but not where it came from, so that the
// caller can name the flag or the variable.
func (c *Config) Set(key, value string) error {
	for _, f := range fields {
		if f.Key == key {
			return parseInto(f.ptr(c), value)
		}
	}
	return fmt.Errorf("unknown setting %q", key)
}

// ApplyEnv sets each setting whose OUTBOX_* environment variable lookup finds
// (os.LookupEnv in production). A variable set to "" counts for strings and
// is ignored for numbers, durations and switches. The error names the
// variable.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	for _, f := range fields {
		v, ok := lookup(f.Env)
		if !ok {
			continue
		}
		if v == "" {
			switch f.ptr(c).(type) {
			case *string, *Secret:
			default:
				continue
			}
		}
		if err := parseInto(f.ptr(c), v); err != nil {
			return fmt.Errorf("%s: %w", f.Env, err)
		}
	}
	return nil
}

func parseInto(p any, s string) error {
	switch p := p.(type) {
	case *string:
		*p = s
	case *Secret:
		*p = NewSecret(s)
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		*p = n
	case *time.Duration:
		d, err := ParseDuration(s)
		if err != nil {
			return err
		}
		*p = d
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*p = b
	default:
		panic(fmt.Sprintf("config: setting of type %T", p))
	}
	return nil
}

func format(p any) string {
	switch p := p.(type) {
	case *string:
		return *p
	case *Secret:
		return p.Redacted()
	case *int:
		return strconv.Itoa(*p)
	case *time.Duration:
		return FormatDuration(*p)
	case *bool:
		return strconv.FormatBool(*p)
	}
	panic(fmt.Sprintf("config: setting of type %T", p))
}
