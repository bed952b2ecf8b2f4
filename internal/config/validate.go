package config

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/colmap"
	"github.com/outboxkit/outbox/publisher/cepub"
	"github.com/outboxkit/outbox/publisher/webhookpub"
	"github.com/outboxkit/outbox/store/pgcdc"
)

// DBSchemes are the URL schemes of the databases the daemon opens.
var DBSchemes = []string{"postgres", "postgresql", "sqlite", "mysql"}

// BrokerSchemes are the URL schemes of the brokers the daemon publishes to.
var BrokerSchemes = []string{"nats", "kafka", "amqp", "amqps", "redis", "rediss", "http", "https", "mqtt", "mqtts"}

var (
	// tableName is a table or schema.table of plain SQL identifiers: the
	// check when the database is not known (db is missing or invalid).
	tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
	// brokerName is what a route may call a broker.
	brokerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	// streamName is a JetStream stream name: no spaces, dots or wildcards.
	streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
)

// problems collects validation errors, each naming its key.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// Validate checks everything `outbox relay` needs and reports every problem
// at once (errors.Join), each naming its key, e.g. "batch_size: 0 is not
// between 1 and 100000". Topic templates are checked by the router the
// daemon builds (internal/daemon.New), which knows their functions.
func (c *Config) Validate() error {
	var p problems
	c.validateDB(&p)
	c.validateBrokers(&p)
	c.validateRelay(&p)
	return errors.Join(p...)
}

// ValidateDB checks only what `outbox migrate` and `outbox status` need: the
// database URL and the table name.
func (c *Config) ValidateDB() error {
	var p problems
	c.validateDB(&p)
	return errors.Join(p...)
}

func (c *Config) validateDB(p *problems) {
	switch s := c.DB.Scheme(); {
	case c.DB.IsZero():
		p.add("db", "required: the database URL (--db, %s, or db: in the config file)", envOf("db"))
	case s == "":
		p.add("db", "%q is not a URL; want %s", c.DB.Redacted(), schemeList(DBSchemes))
	case !slices.Contains(DBSchemes, s):
		p.add("db", "unknown scheme %q; want %s", s, schemeList(DBSchemes))
	case s == "sqlite" && strings.TrimPrefix(c.DB.Value()[len(s)+3:], "/") == "":
		p.add("db", "sqlite:// needs a file path, e.g. sqlite:///var/lib/outbox.db or sqlite://outbox.db")
	case s != "sqlite":
		if why := checkURLHosts(c.DB.Value()); why != "" {
			p.add("db", "the URL %s", why)
		}
	}
	c.validateTable(p)
	if c.DBMaxConns < 0 {
		p.add("db_max_conns", "%d is negative", c.DBMaxConns)
	}
	// migrate acts on these two (it installs the trigger, creates the lease
	// table), so they are checked with the database, not with the relay.
	c.postgresOnly(p, "notify_trigger", c.NotifyTrigger)
	c.postgresOnly(p, "batch_lease", c.BatchLease)
	c.validateCDC(p)
}

// slotName is what PostgreSQL accepts as a replication slot's name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// validateCDC checks the source and the names of its slot and publication,
// which migrate (--cdc) and status read too.
func (c *Config) validateCDC(p *problems) {
	if c.Source != SourcePolling && c.Source != SourceCDC {
		p.add("source", "%q is not %s or %s", c.Source, SourcePolling, SourceCDC)
	}
	if c.Source == SourceCDC {
		c.postgresOnly(p, "source", true)
	}
	if c.CDCSlot != "" && !slotName.MatchString(c.CDCSlot) {
		p.add("cdc_slot", "%q is not 1 to 63 of a-z, 0-9 and _", c.CDCSlot)
	}
	if len(c.CDCPublication) > 63 {
		p.add("cdc_publication", "%q is longer than 63 bytes", c.CDCPublication)
	}
	if c.CDCFailoverAfter < 0 || c.Source == SourceCDC && c.CDCFailoverAfter == 0 {
		p.add("cdc_failover_after", "%v is not positive", c.CDCFailoverAfter)
	}
	c.validateColumns(p)
}

// validateColumns checks the columns mapping and what it needs: polling
// (source polling, or the fallback of source cdc) with the state columns
// mapped, none of the pgstore switches that do not take a mapping yet, and
// rows kept when it keeps the state columns.
func (c *Config) validateColumns(p *problems) {
	if len(c.Columns) == 0 {
		if c.CDCDeadTable != "" {
			p.add("cdc_dead_table", "only with a log-only columns: mapping (no state columns)")
		}
		return
	}
	if err := colmap.Map(c.Columns).Validate(); err != nil {
		for _, e := range strings.Split(err.Error(), "\n") {
			p.add("columns", "%s", e)
		}
	}
	if c.Source != SourceCDC && c.LogOnly() {
		p.add("columns", "a log-only mapping (no state columns) needs source: cdc; polling settles rows in the table")
	}
	if !c.LogOnly() {
		for _, o := range []struct {
			key string
			on  bool
		}{{"notify_trigger", c.NotifyTrigger}, {"batch_lease", c.BatchLease}} {
			if o.on {
				p.add(o.key, "not available with a columns: mapping yet")
			}
		}
	}
	switch {
	case c.LogOnly() && c.DeleteSent:
		p.add("delete_sent", "a log-only table (columns: maps no state columns) is never written to")
	case !c.LogOnly() && c.CDCDeadTable != "":
		p.add("cdc_dead_table", "only with a log-only columns: mapping; with state columns dead rows are marked in the table")
	}
	if c.CDCDeadTable != "" && !tableName.MatchString(c.CDCDeadTable) {
		p.add("cdc_dead_table", "%q is not a table or schema.table name", c.CDCDeadTable)
	}
}

// CDCSlotName is the replication slot of source cdc: CDCSlot, or the
// table's default (pgcdc.SlotName).
func (c *Config) CDCSlotName() string { return cmp.Or(c.CDCSlot, pgcdc.SlotName(c.Table)) }

// CDCPublicationName is the publication of source cdc: CDCPublication, or
// the table's default (pgcdc.PublicationName).
func (c *Config) CDCPublicationName() string {
	return cmp.Or(c.CDCPublication, pgcdc.PublicationName(c.Table))
}

// postgresOnly reports a switch of pgstore's that is on while db names
// another database. A db that names none (missing or invalid) has its own
// problem, and is not reported again here.
func (c *Config) postgresOnly(p *problems, key string, on bool) {
	if s := c.DB.Scheme(); on && s != "" && s != "postgres" && s != "postgresql" {
		p.add(key, "applies to postgres:// only, not %s://", s)
	}
}

// tableRule is what one database's store accepts as a table name.
type tableRule struct {
	part     *regexp.Regexp // each part of "name" or "schema.name"
	describe string         // part, in words, for the error
	reserved string         // a prefix the name (not the schema) must not have, case-insensitive; "" for none
}

// tableRules copy what each store's New accepts (pgstore's identPart,
// mysqlstore's and sqlitestore's identPattern and parseTable), so that a
// name the store would refuse when the relay starts is reported here, with
// the other config problems and exit code 2. TestTableRulesMatchStores fails
// when a store's rule changes and these do not. PostgreSQL names must be
// lower case because pgstore quotes them: "Outbox" would be a different
// table from the outbox that unquoted SQL means.
var tableRules = map[string]tableRule{
	"postgres": {
		part:     regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`),
		describe: "a lower-case letter or underscore, then up to 62 lower-case letters, digits or underscores",
	},
	"mysql": {
		part:     regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`),
		describe: "a letter or underscore, then up to 63 letters, digits or underscores",
	},
	"sqlite": {
		part:     regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`),
		describe: "a letter or underscore, then up to 62 letters, digits or underscores",
		reserved: "sqlite_",
	},
}

// validateTable checks the table name against the rule of the database db
// names, or against the loosest rule when db names none it knows (db has
// its own problem then).
func (c *Config) validateTable(p *problems) {
	scheme := c.DB.Scheme()
	if scheme == "postgresql" {
		scheme = "postgres"
	}
	rule, ok := tableRules[scheme]
	if !ok {
		if !tableName.MatchString(c.Table) {
			p.add("table", "%q is not a valid table name (letters, digits and underscores, optionally schema.table)", c.Table)
		}
		return
	}
	parts := strings.Split(c.Table, ".")
	valid := len(parts) <= 2
	for _, part := range parts {
		valid = valid && rule.part.MatchString(part)
	}
	if !valid {
		p.add("table", "%q is not a valid table name for %s:// (name or schema.name, each part %s)",
			c.Table, scheme, rule.describe)
		return
	}
	if name := parts[len(parts)-1]; rule.reserved != "" && strings.HasPrefix(strings.ToLower(name), rule.reserved) {
		p.add("table", "%q is not a valid table name for %s://: names starting with %s are reserved",
			c.Table, scheme, rule.reserved)
	}
}

func (c *Config) validateBrokers(p *problems) {
	if !c.Broker.IsZero() && len(c.Brokers) > 0 {
		p.add("broker", "set either broker (one broker) or brokers (a list), not both")
		return
	}
	brokers := c.EffectiveBrokers()
	if len(brokers) == 0 {
		p.add("broker", "required: a broker URL (--broker, %s, or broker: or brokers: in the config file)", envOf("broker"))
		return
	}
	names := make(map[string]bool, len(brokers))
	for i, b := range brokers {
		key := fmt.Sprintf("brokers[%d]", i)
		if !c.Broker.IsZero() {
			key = "broker"
		}
		switch {
		case b.Name == "":
			p.add(key+".name", "required")
		case !brokerName.MatchString(b.Name):
			p.add(key+".name", "%q is not a valid name (letters, digits, '_', '.', '-')", b.Name)
		case names[b.Name]:
			p.add(key+".name", "%q is used by another broker", b.Name)
		}
		names[b.Name] = true
		validateBroker(p, key, &b)
	}

	for i, r := range c.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if r.EventType == "" && r.AggregateType == "" {
			p.add(key, "needs event_type or aggregate_type (default_route takes everything else)")
		}
		validateRoute(p, key, &r, names)
	}
	if r := c.DefaultRoute; r != nil {
		if r.EventType != "" || r.AggregateType != "" {
			p.add("default_route", "takes what no route matched: it has no event_type or aggregate_type")
		}
		validateRoute(p, "default_route", r, names)
	}
	c.validateOutputs(p, brokers)
	if len(brokers) > 1 && len(c.Routes) == 0 && c.DefaultRoute == nil {
		p.add("routes", "%d brokers but no routes and no default_route: say which messages go where", len(brokers))
	}
}

func validateBroker(p *problems, key string, b *Broker) {
	scheme := b.URL.Scheme()
	switch {
	case b.URL.IsZero():
		p.add(key+".url", "required")
		return
	case scheme == "":
		p.add(key+".url", "%q is not a URL; want %s", b.URL.Redacted(), schemeList(BrokerSchemes))
		return
	case !slices.Contains(BrokerSchemes, scheme):
		p.add(key+".url", "unknown scheme %q; want %s", scheme, schemeList(BrokerSchemes))
		return
	}
	if why := checkURLHosts(b.URL.Value()); why != "" {
		p.add(key+".url", "the URL %s", why)
	}
	validateBrokerOptions(p, key, scheme, b)
	if scheme == "nats" {
		validateNATS(p, key, b)
	}
	validateBrokerValues(p, key, b)
	if scheme == "http" || scheme == "https" {
		// Their errors never show the URL or the secret.
		if err := webhookpub.CheckEndpoint(b.URL.Value()); err != nil {
			p.add(key+".url", "%v", err)
		}
		if !b.Secret.IsZero() {
			if err := webhookpub.CheckSecret(b.Secret.Value()); err != nil {
				p.add(key+".secret", "%s", strings.TrimPrefix(err.Error(), "webhookpub: secret: "))
			}
		}
	}
}

// validateBrokerOptions refuses the options that do not apply to scheme.
func validateBrokerOptions(p *problems, key, scheme string, b *Broker) {
	only := func(set bool, option string, schemes ...string) {
		if set && !slices.Contains(schemes, scheme) {
			p.add(key+"."+option, "applies to %s only, not %s://", schemeList(schemes), scheme)
		}
	}
	only(b.Prefix != nil, "prefix", "nats", "kafka", "amqp", "amqps", "redis", "rediss", "mqtt", "mqtts")
	only(b.Stream != "", "stream", "nats")
	only(len(b.Subjects) > 0, "subjects", "nats")
	only(b.DuplicateWindow != 0, "duplicate_window", "nats")
	only(b.Exchange != "", "exchange", "amqp", "amqps")
	only(b.MaxLen != 0, "max_len", "redis", "rediss")
	only(b.DedupTTL != 0, "dedup_ttl", "redis", "rediss")
	only(!b.Secret.IsZero(), "secret", "http", "https")
	only(b.Concurrency != 0, "concurrency", "http", "https")
	only(b.Batch != 0, "batch", "http", "https")
	only(len(b.Headers) > 0, "headers", "http", "https")
	only(b.PermanentStatus != nil, "permanent_status", "http", "https")
}

// validateNATS checks the stream options of a nats:// broker.
func validateNATS(p *problems, key string, b *Broker) {
	if b.Stream != "" && !streamName.MatchString(b.Stream) {
		p.add(key+".stream", "%q is not a valid stream name (letters, digits, '_', '-')", b.Stream)
	}
	if len(b.EffectiveSubjects()) == 0 {
		p.add(key+".subjects", "required when prefix is empty: the subjects the stream captures")
	}
	for j, s := range b.Subjects {
		if s == "" || strings.ContainsAny(s, " \t") {
			p.add(fmt.Sprintf("%s.subjects[%d]", key, j), "%q is not a valid subject", s)
		}
	}
	if b.DuplicateWindow < 0 {
		p.add(key+".duplicate_window", "%v is negative", b.DuplicateWindow)
	}
}

// validateBrokerValues checks the values of the options a broker has.
func validateBrokerValues(p *problems, key string, b *Broker) {
	if b.MaxLen < 0 {
		p.add(key+".max_len", "%d is negative", b.MaxLen)
	}
	if b.DedupTTL < 0 {
		p.add(key+".dedup_ttl", "%v is negative", b.DedupTTL)
	}
	if b.Concurrency < 0 {
		p.add(key+".concurrency", "%d is negative", b.Concurrency)
	}
	if b.Batch < 0 {
		p.add(key+".batch", "%d is negative", b.Batch)
	}
	for name := range b.Headers {
		if name == "" || strings.ContainsAny(name, " \t\r\n:") {
			p.add(key+".headers", "%q is not a header name", name)
		}
	}
	for _, code := range b.PermanentStatus {
		if code < 300 || code > 599 {
			p.add(key+".permanent_status", "%d is not a status code from 300 to 599", code)
		}
	}
}

// validateOutputs checks the format and CloudEvents mode of every broker and
// route: known values, and a combination the broker can carry.
func (c *Config) validateOutputs(p *problems, brokers []Broker) {
	byName := make(map[string]*Broker, len(brokers))
	for i := range brokers {
		byName[brokers[i].Name] = &brokers[i]
	}
	type use struct {
		key string
		out Output
	}
	first := make(map[string]use) // a webhook or MQTT broker's first format
	if src := c.CloudEventsSource; src != "" {
		if u, err := url.Parse(src); err != nil || strings.ContainsAny(src, " \t\r\n") || u.String() == "" {
			p.add("cloudevents_source", "%q is not a URI-reference (CloudEvents source), e.g. /shop/orders", src)
		}
	}
	// check checks route r (key) on broker b; a route that takes messages
	// (not a broker's own settings) also counts towards its broker's formats.
	check := func(key string, r *Route, b *Broker, takes bool) {
		format, mode := r.Format, r.CloudEventsMode
		if !takes {
			format, mode = b.Format, b.CloudEventsMode
		}
		if !validOutput(p, key, format, mode) {
			return
		}
		o := RouteOutput(r, b)
		scheme := b.URL.Scheme()
		own := !takes || r.Format != "" || r.CloudEventsMode != "" // else the broker's check said it
		switch {
		case !own:
		case o.Format != FormatCloudEvents && cmp.Or(r.CloudEventsMode, b.CloudEventsMode) != "":
			p.add(key+".cloudevents_mode", "is for format: %s, and this one is %s", FormatCloudEvents, o.Format)
		case o.Mode == CloudEventsBinary && !CloudEventsBinding(scheme).Binary():
			p.add(key+".cloudevents_mode", "binary mode puts the attributes in headers, which %s has not "+
				"(MQTT 3.1.1 has no user properties; Redis no CloudEvents binding): use %s", scheme, CloudEventsStructured)
		case o.Format == FormatCloudEvents && b.Batch > 0:
			p.add(key+".format", "%s sends one event per webhook request, and broker %s batches: drop its batch",
				FormatCloudEvents, b.Name)
		}
		if !takes || CloudEventsBinding(scheme) != cepub.HTTP && CloudEventsBinding(scheme) != cepub.MQTT {
			return
		}
		// webhookpub and mqttpub send envelopes or raw payloads, one of the two.
		if u, ok := first[b.Name]; !ok {
			first[b.Name] = use{key, o}
		} else if (u.out.Format == FormatCloudEvents) != (o.Format == FormatCloudEvents) {
			p.add(key+".format", "broker %s (%s) sends one format, and %s gives it %s: give this route a broker "+
				"entry of its own with the same URL", b.Name, scheme, u.key, u.out.Format)
		}
	}
	for i := range brokers {
		b := &brokers[i]
		key := fmt.Sprintf("brokers[%d]", i)
		if !c.Broker.IsZero() {
			key = "broker"
		}
		check(key, &Route{}, b, false)
	}
	for i := range c.Routes {
		if b := byName[c.Routes[i].Broker]; b != nil {
			check(fmt.Sprintf("routes[%d]", i), &c.Routes[i], b, true)
		}
	}
	if r := c.DefaultRoute; r != nil && byName[r.Broker] != nil {
		check("default_route", r, byName[r.Broker], true)
	}
}

// validOutput checks that format and mode are known values or empty.
func validOutput(p *problems, key, format, mode string) bool {
	ok := true
	if format != "" && format != FormatOutbox && format != FormatCloudEvents {
		p.add(key+".format", "%q is not %s or %s", format, FormatOutbox, FormatCloudEvents)
		ok = false
	}
	if mode != "" && mode != CloudEventsBinary && mode != CloudEventsStructured {
		p.add(key+".cloudevents_mode", "%q is not %s or %s", mode, CloudEventsBinary, CloudEventsStructured)
		ok = false
	}
	return ok
}

func validateRoute(p *problems, key string, r *Route, brokers map[string]bool) {
	switch {
	case r.Broker == "":
		p.add(key+".broker", "required: the name of a broker")
	case !brokers[r.Broker]:
		p.add(key+".broker", "no broker is named %q", r.Broker)
	}
	for _, m := range []struct{ name, pattern string }{{"event_type", r.EventType}, {"aggregate_type", r.AggregateType}} {
		if _, err := path.Match(m.pattern, ""); err != nil {
			p.add(key+"."+m.name, "%q is not a valid pattern (* and ? wildcards, [a-z] classes)", m.pattern)
		}
	}
	switch r.Unroutable {
	case "", UnroutableRetry, UnroutableDead:
	default:
		p.add(key+".unroutable", "%q is not %s or %s", r.Unroutable, UnroutableRetry, UnroutableDead)
	}
}

func (c *Config) validateRelay(p *problems) {
	c.validateSizing(p)
	c.validateModes(p)
	c.validateOutput(p)
}

// validateSizing checks the relay's counts and durations.
func (c *Config) validateSizing(p *problems) {
	if c.Relays < 1 || c.Relays > 256 {
		p.add("relays", "%d is not between 1 and 256", c.Relays)
	}
	if c.BatchSize < 0 || c.BatchSize > 100_000 {
		p.add("batch_size", "%d is not between 0 (sized by the relay) and 100000", c.BatchSize)
	}
	if c.MinBatchSize < 1 || c.MinBatchSize > 100_000 {
		p.add("min_batch_size", "%d is not between 1 and 100000", c.MinBatchSize)
	}
	if c.MaxBatchSize < c.MinBatchSize || c.MaxBatchSize > 100_000 {
		p.add("max_batch_size", "%d is not between min_batch_size (%d) and 100000", c.MaxBatchSize, c.MinBatchSize)
	}
	if c.MinPollInterval < time.Millisecond {
		p.add("min_poll_interval", "%v is less than 1ms", c.MinPollInterval)
	}
	if c.RelayTTL != 0 && c.RelayTTL < 300*time.Millisecond {
		p.add("relay_ttl", "%v is neither 0 nor at least 300ms", c.RelayTTL)
	}
	if c.MinInFlight < 1 || c.MinInFlight > 64 {
		p.add("min_in_flight", "%d is not between 1 and 64", c.MinInFlight)
	}
	if c.MaxInFlight < c.MinInFlight || c.MaxInFlight > 64 {
		p.add("max_in_flight", "%d is not between min_in_flight (%d) and 64", c.MaxInFlight, c.MinInFlight)
	}
	if c.MaxAttempts < 1 {
		p.add("max_attempts", "%d is less than 1", c.MaxAttempts)
	}
	for _, d := range []struct {
		key string
		v   any
		ok  bool
	}{
		{"poll_interval", c.PollInterval, c.PollInterval > 0},
		{"backoff_base", c.BackoffBase, c.BackoffBase > 0},
		{"publish_timeout", c.PublishTimeout, c.PublishTimeout > 0},
		{"store_timeout", c.StoreTimeout, c.StoreTimeout > 0},
		{"probe_interval", c.ProbeInterval, c.ProbeInterval > 0},
	} {
		if !d.ok {
			p.add(d.key, "%v is not positive", d.v)
		}
	}
	if c.BackoffBase > 0 && c.BackoffCap < c.BackoffBase {
		p.add("backoff_cap", "%v is below backoff_base (%v)", c.BackoffCap, c.BackoffBase)
	}
	if c.PublishTimeout > 0 && c.Lease < 2*c.PublishTimeout {
		p.add("lease", "%v is shorter than twice publish_timeout (%v)", c.Lease, c.PublishTimeout)
	}
	if c.ProbeInterval > 0 && c.MaxProbeInterval < c.ProbeInterval {
		p.add("max_probe_interval", "%v is below probe_interval (%v)", c.MaxProbeInterval, c.ProbeInterval)
	}
}

// validateModes checks the claim modes, the dead policy, the archive and
// the payload limit.
func (c *Config) validateModes(p *problems) {
	c.postgresOnly(p, "notify", c.Notify)
	c.postgresOnly(p, "async_commit", c.AsyncCommit)
	c.postgresOnly(p, "held_claims", c.HeldClaims)
	if c.HeldClaims && c.BatchLease {
		p.add("held_claims", "excludes batch_lease: they are two ways of claiming; choose one")
	}
	if c.HeldClaims && c.Ordering {
		p.add("held_claims", "needs ordering: false (ordered claims lease their rows; they are never held)")
	}
	if c.DeadPolicy != "block" && c.DeadPolicy != "skip" {
		p.add("dead_policy", "%q is not block or skip", c.DeadPolicy)
	}
	if c.ArchiveEvery < 0 {
		p.add("archive_every", "%v is negative (0 turns the scheduled archive off)", c.ArchiveEvery)
	}
	if c.ArchiveOlderThan < 0 {
		p.add("archive_older_than", "%v is negative (0s archives every sent row)", c.ArchiveOlderThan)
	}
	if c.ArchiveBatch < 1 || c.ArchiveBatch > MaxArchiveBatch {
		p.add("archive_batch", "%d is not between 1 and %d", c.ArchiveBatch, MaxArchiveBatch)
	}
	if c.MaxPayload < 0 {
		p.add("max_payload", "%d is negative (0 means no limit)", c.MaxPayload)
	}
}

// validateOutput checks the logs, the name, the statistics, the traces and
// the HTTP server.
func (c *Config) validateOutput(p *problems) {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		p.add("log_level", "%q is not debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		p.add("log_format", "%q is not text or json", c.LogFormat)
	}
	if !brokerName.MatchString(c.Name) {
		p.add("name", "%q is not a valid name (letters, digits, '_', '.', '-')", c.Name)
	}
	if c.StatsInterval <= 0 {
		p.add("stats_interval", "%v is not positive", c.StatsInterval)
	}
	if !slices.Contains([]string{"none", "stdout", "otlp"}, c.TraceExporter) {
		p.add("trace_exporter", "%q is not none, stdout or otlp", c.TraceExporter)
	}
	if c.TraceEndpoint != "" && c.TraceExporter != "otlp" {
		p.add("trace_endpoint", "applies to trace_exporter otlp only, not %q", c.TraceExporter)
	}
	if c.HTTP != "" {
		if why := checkListen(c.HTTP); why != "" {
			p.add("http", "%s", why)
		}
	}
	if c.TraceEndpoint != "" {
		if why := checkEndpoint(c.TraceEndpoint); why != "" {
			p.add("trace_endpoint", "%s", why)
		}
	}
}

// RelayDeadPolicy returns DeadPolicy as the outbox package's value.
func (c *Config) RelayDeadPolicy() outbox.DeadPolicy {
	if c.DeadPolicy == "skip" {
		return outbox.DeadSkips
	}
	return outbox.DeadBlocks
}

func envOf(key string) string { return EnvPrefix + strings.ToUpper(key) }

func schemeList(schemes []string) string {
	out := make([]string, len(schemes))
	for i, s := range schemes {
		out[i] = s + "://"
	}
	return strings.Join(out, ", ")
}
