// Package metrics exports a relay's health to Prometheus and serves the
// daemon's /metrics, /healthz and /readyz.
//
// [NewMetrics] registers the relay's metrics with a registry the caller owns
// (never the global one). The returned [*Metrics] is a relay hook: pass it to
// the relay with outbox.WithHooks, start [Metrics.PollStats] beside the relay
// for the table's backlog, wrap the publisher with [Metrics.WrapPublisher] to
// time the broker, and flip [Metrics.SetUp] around Relay.Run:
//
//	reg := metrics.NewRegistry()
//	m, err := metrics.NewMetrics(reg, metrics.WithRelayName("orders"))
//	relay, err := outbox.NewRelay(store, m.WrapPublisher(pub), outbox.WithHooks(m))
//	g.Go(func() error { return m.PollStats(ctx, store, 0) })
//	g.Go(func() error { m.SetUp(true); defer m.SetUp(false); return relay.Run(ctx) })
//	srv := &http.Server{Addr: "127.0.0.1:9090", Handler: metrics.NewServeMux(reg,
//		metrics.PingCheck("store", store), metrics.PingCheck("broker", pub))}
//
// # Metrics
//
// Every series has a relay label. From the hooks:
//
//	outbox_relay_up                          gauge      1 while Relay.Run runs
//	outbox_relay_destination_up              gauge      0 while the broker is down and the relay probes it
//	outbox_relay_destination_outages_total   counter    times the broker was found down
//	outbox_relay_published_total             counter    messages by result and destination
//	outbox_relay_publish_attempt             histogram  attempt number of each counted attempt
//	outbox_relay_delivery_latency_seconds    histogram  commit (created_at) to broker confirmation
//	outbox_relay_batch_size                  histogram  rows per claim
//	outbox_relay_batch_duration_seconds      histogram  claim to acknowledgement
//	outbox_relay_batch_errors_total          counter    cycles cut short by a store error
//	outbox_relay_fenced_total                counter    published rows another relay took over
//	outbox_relay_publish_duration_seconds    histogram  one Publish call (WrapPublisher)
//
// From the table, through PollStats:
//
//	outbox_pending_messages            gauge    status 0 rows
//	outbox_oldest_pending_age_seconds  gauge    age of the oldest of them
//	outbox_dead_messages               gauge    status 2 rows
//	outbox_other_status_messages       gauge    rows with a NULL or unknown status, which the relay never touches
//	outbox_sent_last_minute_messages   gauge    rows acknowledged in the last minute
//	outbox_stats_up                    gauge    1 when the last Stats query succeeded
//	outbox_stats_duration_seconds      gauge    how long it took
//	outbox_stats_errors_total          counter  Stats queries that failed
//
// From a scheduled archive (the daemon's archive_every), once
// [Metrics.StartArchive] was called; [Metrics.OnArchiveBatch] and
// [Metrics.OnArchiveRun] feed them:
//
//	outbox_archived_total                          counter  rows taken out of the table, by mode (move, delete)
//	outbox_archive_runs_total                      counter  finished runs, by result (ok, error)
//	outbox_archive_last_success_timestamp_seconds  gauge    when a run or batch last succeeded (start time before)
//	outbox_archive_interval_seconds                gauge    the schedule's period
//
// # Labels
//
// The result label takes the values of outbox.Result (ok and error on
// outbox_archive_runs_total), and mode is move or delete. The destination label
// is Message.Destination by default, which may be unbounded (a topic per
// aggregate); only the first [DefaultMaxDestinations] distinct values get
// their own series and the rest are counted as [OtherDestination]. Change
// the function with [WithDestinationLabel] and the cap with
// [WithMaxDestinations]. Histograms carry no destination label. No label
// ever holds a message or aggregate id.
//
// deploy/prometheus/alerts.yml and deploy/grafana/outbox.json are built on
// these names, and this package's tests check that they name nothing else;
// docs/operations.md explains each alert.
package metrics
