package demo

import (
	"errors"
	"fmt"
	"github.com/outboxkit/outbox/internal/redact"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// Defaults of [Config]. A zero field takes its default, so Config{} is the
// demo a new user runs: 1,000 orders in about 4 s on embedded SQLite and NATS,
// with the broker dark from 1 s to 2.6 s.
const (
	// DefaultOrders is how many orders the payment service pays.
	DefaultOrders = 1000
	// DefaultPayTime is how long paying them takes.
	DefaultPayTime = 4 * time.Second
	// DefaultOutageAt is when the broker goes dark, as a fraction of PayTime.
	DefaultOutageAt = 0.25
	// DefaultOutageFor is how long it stays dark, as a fraction of PayTime.
	DefaultOutageFor = 0.40
	// DefaultDeclines is the fraction of payments declined.
	DefaultDeclines = 0.03
	// DefaultDrainTimeout bounds the wait for every path to deliver.
	DefaultDrainTimeout = 30 * time.Second
	// PublishTimeout bounds one publish, the same for the hand-written paths
	// and for the relay, so that every path meets the outage the same way.
	PublishTimeout = time.Second
	// maxOrders keeps a mistyped --orders from filling a disk.
	maxOrders = 1_000_000
)

// Config says which demo to run. The zero value runs the embedded defaults;
// every zero field takes the default named in its comment.
type Config struct {
	// Orders is how many orders the payment service pays. Default: DefaultOrders (1,000).
	Orders int
	// DB is where the services keep their tables: "" runs SQLite in a
	// temporary folder (one file per service, removed at the end);
	// "postgres://..." or "postgresql://..." runs on that PostgreSQL, in
	// tables with a fresh name per run, dropped at the end. Default: "".
	DB string
	// Broker is the NATS JetStream server: "" starts an embedded server in a
	// temporary folder; "nats://host:port" uses that server, with fresh
	// streams per run, deleted at the end. Default: "".
	Broker string
	// PayTime is how long the payment service takes to pay all orders: they
	// arrive at an even pace over this time. Default: DefaultPayTime (4 s).
	PayTime time.Duration
	// OutageAt is when the broker goes dark, counted from the first payment.
	// Default: DefaultOutageAt × PayTime.
	OutageAt time.Duration
	// OutageFor is how long the broker stays dark: for the first half the
	// network stops answering (publishes hang until they time out), for the
	// second half connections are refused (publishes fail at once).
	// Default: DefaultOutageFor × PayTime.
	OutageFor time.Duration
	// Declines is the fraction of payments whose transaction rolls back after
	// the order was marked paid (the card processor declined). The same orders
	// are declined on every path. Negative means none.
	// Default: DefaultDeclines (3%).
	Declines float64
	// Seed picks the declined orders and the jitter of arrival times. Zero
	// picks a random seed, reported in Summary.Seed so a run can be repeated
	// (counts still vary a little: they depend on timing).
	Seed int64
	// DrainTimeout bounds the wait, once the last payment returned and the
	// broker is back, for every path to deliver what it is going to deliver.
	// Run fails with an error saying what is left when the outbox has not
	// drained by then. Default: DefaultDrainTimeout (30 s).
	DrainTimeout time.Duration
	// CDC makes the outbox path's relay read the outbox table's inserts
	// from PostgreSQL's write-ahead log (store/pgcdc, source cdc) instead of
	// polling it: PostgreSQL with wal_level = logical only. The run creates
	// a slot and a publication for its table and drops them at the end.
	// Default: false.
	CDC bool
	// Quiet prints only the final table, no progress. Default: false.
	Quiet bool
	// Logger receives what the services log: the naive paths' lost
	// publishes, the relay's retries. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	if cfg.Orders == 0 {
		cfg.Orders = DefaultOrders
	}
	if cfg.PayTime == 0 {
		cfg.PayTime = DefaultPayTime
	}
	if cfg.OutageAt == 0 {
		cfg.OutageAt = time.Duration(DefaultOutageAt * float64(cfg.PayTime))
	}
	if cfg.OutageFor == 0 {
		cfg.OutageFor = time.Duration(DefaultOutageFor * float64(cfg.PayTime))
	}
	switch {
	case cfg.Declines == 0:
		cfg.Declines = DefaultDeclines
	case cfg.Declines < 0:
		cfg.Declines = 0
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validate reports every bad field of a defaulted config at once.
func (cfg Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(cfg.Orders > 0 && cfg.Orders <= maxOrders, "orders: %d is not between 1 and %d", cfg.Orders, maxOrders)
	check(cfg.PayTime > 0, "pay time: %v is not positive", cfg.PayTime)
	check(cfg.OutageAt > 0, "outage start: %v is not positive", cfg.OutageAt)
	check(cfg.OutageFor > 0, "outage length: %v is not positive", cfg.OutageFor)
	check(cfg.Declines < 0.5, "declines: %v is not below 0.5", cfg.Declines)
	check(cfg.DrainTimeout > 0, "drain timeout: %v is not positive", cfg.DrainTimeout)
	d, err := dbKind(cfg.DB)
	if err != nil {
		errs = append(errs, err)
	}
	check(!cfg.CDC || d == postgresDialect, "cdc: needs PostgreSQL (--db postgres://...)")
	if cfg.Broker != "" {
		if u, err := url.Parse(cfg.Broker); err != nil || u.Scheme != "nats" || u.Host == "" {
			errs = append(errs, fmt.Errorf("broker: want nats://host:port or nothing (embedded), got %q", redact.URLs(cfg.Broker)))
		}
	}
	return errors.Join(errs...)
}

// dbKind says which database a Config.DB names.
func dbKind(dsn string) (dialect, error) {
	switch {
	case dsn == "":
		return sqliteDialect, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgresDialect, nil
	}
	return 0, fmt.Errorf("db: want postgres://... or nothing (embedded SQLite), got %q", redact.URLs(dsn))
}
