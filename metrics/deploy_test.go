package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/metrics"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	alertsFile     = "../deploy/prometheus/alerts.yml"
	alertsTestFile = "../deploy/prometheus/alerts_test.yml"
	dashboardFile  = "../deploy/grafana/outbox.json"
	operationsFile = "../docs/operations.md"
	runbookBase    = "https://github.com/outboxkit/outbox/blob/main/docs/operations.md#"
)

// exportedSeries returns every series name package metrics exports (a
// histogram's _bucket, _sum and _count), found by driving a Metrics until it
// has produced every family it describes.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	b := setup(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewMetrics(reg)
	require.NoError(t, err)
	m.SetUp(true)
	m.OnMessage(outbox.MessageEvent{Message: &outbox.Message{EventType: "E", Attempt: 1, CreatedAt: time.Now()},
		Result: outbox.ResultSent})
	m.OnBatch(outbox.BatchEvent{Claimed: 1, Fenced: 1, Err: fmt.Errorf("ack: broken")})
	m.OnDestination(false, nil)
	m.WrapPublisher(outboxtest.NewPublisher()).Publish(context.Background(), nil)
	m.StartArchive(time.Hour, false)
	m.OnArchiveBatch(10, false)
	m.OnArchiveRun(nil)
	require.NoError(t, m.WatchSlot("outbox_orders", func(context.Context) (metrics.SlotReading, error) {
		return metrics.SlotReading{Exists: true, WALStatus: "reserved", LagBytes: new(int64), SafeWALSize: new(int64)}, nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, m.PollStats(ctx, b.store, time.Minute)) })
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return valueOr(t, reg, "outbox_stats_up", nil, 0) == 1
	}, "stats were not polled")
	cancel()
	wg.Wait()

	descs := make(chan *prometheus.Desc, 100)
	m.Describe(descs)
	close(descs)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, len(descs), "every described metric was produced")

	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		require.True(t, strings.HasPrefix(n, "outbox_"), n)
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		} else {
			names[n] = true
		}
	}
	return names
}

// githubAnchors returns the anchors GitHub gives the headings of a Markdown file.
func githubAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	punct := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	anchors := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := strings.ReplaceAll(punct.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		anchors[a] = true
	}
	return anchors
}

// promtool returns the path of promtool, skipping t when it is not installed
// (failing it under CI=true, where .ci/run installs it).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if testsvc.InCI() {
			t.Fatalf("promtool is required in CI (apt-get install prometheus): %v", err)
		}
		t.Skipf("skipped: promtool not installed (apt-get install prometheus): %v", err)
	}
	return path
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var rf ruleFile
	require.NoError(t, dec.Decode(&rf), "alerts.yml has only the fields Prometheus knows")

	exported := exportedSeries(t)
	anchors := githubAnchors(t, operationsFile)
	want := map[string]struct {
		severity string
		for_     string
		in       []string // what the expression must say
	}{
		"OutboxBacklogHigh":           {"warning", "5m", []string{"outbox_pending_messages", "> 1000"}},
		"OutboxOldestPendingTooOld":   {"warning", "1m", []string{"outbox_oldest_pending_age_seconds", "> 300"}},
		"OutboxPublishSuccessRateLow": {"critical", "10m", []string{"outbox_relay_published_total", "< 0.99"}},
		"OutboxDeadMessages":          {"warning", "", []string{"outbox_dead_messages", "> 0"}},
		"OutboxRelayDown":             {"critical", "2m", []string{"outbox_relay_up", "up{job=~\"outbox.*\"} == 0"}},
		"OutboxArchiveFailing": {"warning", "", []string{"outbox_archive_last_success_timestamp_seconds",
			"clamp_min(3 * max by (job, instance, relay) (outbox_archive_interval_seconds), 3600)"}},
		"OutboxCDCSlotInactive":    {"warning", "5m", []string{"outbox_cdc_slot_active", "== 0"}},
		"OutboxCDCSlotLagHigh":     {"warning", "5m", []string{"outbox_cdc_slot_lag_bytes", "> 1073741824"}},
		"OutboxCDCSlotLagCritical": {"critical", "5m", []string{"outbox_cdc_slot_lag_bytes", "> 17179869184"}},
		"OutboxCDCSlotNearLimit":   {"critical", "1m", []string{"outbox_cdc_slot_safe_wal_size_bytes", "< 0.2"}},
		"OutboxCDCSlotWALAtRisk":   {"critical", "", []string{`outbox_cdc_slot_wal_status{wal_status=~"unreserved|lost"}`, "== 1"}},
	}
	var seen []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			t.Run(r.Alert, func(t *testing.T) {
				w, ok := want[r.Alert]
				require.True(t, ok, "unexpected alert %q", r.Alert)
				require.Equal(t, w.severity, r.Labels["severity"])
				require.Equal(t, w.for_, r.For)
				for _, s := range w.in {
					require.Contains(t, r.Expr, s)
				}
				names := metricNames(r.Expr)
				require.NotEmpty(t, names)
				for _, n := range names {
					// up is the scrape health Prometheus itself records for every target.
					require.True(t, exported[n] || n == "up", "%s names %q, which package metrics does not export", r.Alert, n)
				}
				require.NotEmpty(t, r.Annotations["summary"])
				require.NotEmpty(t, r.Annotations["description"])
				anchor := strings.ToLower(r.Alert)
				require.Equal(t, runbookBase+anchor, r.Annotations["runbook_url"])
				require.True(t, anchors[anchor], "docs/operations.md has no heading for #%s", anchor)
			})
			seen = append(seen, r.Alert)
		}
	}
	slices.Sort(seen)
	require.Equal(t, []string{"OutboxArchiveFailing", "OutboxBacklogHigh", "OutboxCDCSlotInactive", "OutboxCDCSlotLagCritical",
		"OutboxCDCSlotLagHigh", "OutboxCDCSlotNearLimit", "OutboxCDCSlotWALAtRisk", "OutboxDeadMessages",
		"OutboxOldestPendingTooOld", "OutboxPublishSuccessRateLow", "OutboxRelayDown"}, seen, "exactly these alerts, once each")

	t.Run("Promtool", func(t *testing.T) {
		dir := filepath.Dir(alertsFile)
		runPromtool(t, dir, "check", "rules", filepath.Base(alertsFile))
		runPromtool(t, dir, "test", "rules", filepath.Base(alertsTestFile))
	})
}

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	require.Positive(t, d.SchemaVersion)
	exported := exportedSeries(t)
	promDS := datasource{Type: "prometheus", UID: "${datasource}"}

	// Variables: a Prometheus data source, and queries on exported metrics.
	var hasDS bool
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			require.Equal(t, "datasource", v.Name)
			require.JSONEq(t, `"prometheus"`, string(v.Query))
			hasDS = true
		case "query":
			require.Equal(t, &promDS, v.Datasource, "variable %s", v.Name)
			var q struct{ Query string }
			require.NoError(t, json.Unmarshal(v.Query, &q))
			m := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`).FindStringSubmatch(q.Query)
			require.NotNil(t, m, "variable %s: %q is not label_values(metric, label)", v.Name, q.Query)
			for _, n := range metricNames(m[1]) {
				require.True(t, exported[n], "variable %s names %q, which package metrics does not export", v.Name, n)
			}
		}
	}
	require.True(t, hasDS, "a Prometheus data source variable")

	used := map[string]bool{}
	ids := map[int]bool{}
	var titles []string
	var exprs []string
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.NotEmpty(t, p.Title, "panel %d", p.ID)
		require.True(t, p.GridPos.W > 0 && p.GridPos.H > 0 && p.GridPos.X+p.GridPos.W <= 24, "panel %q grid", p.Title)
		if p.Type == "row" {
			continue
		}
		titles = append(titles, strings.ToLower(p.Title))
		require.Equal(t, &promDS, p.Datasource, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			require.False(t, refs[tg.RefID], "panel %q: refId %s twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			require.Equal(t, &promDS, tg.Datasource, "panel %q", p.Title)
			names := metricNames(tg.Expr)
			require.NotEmpty(t, names, "panel %q: %q", p.Title, tg.Expr)
			for _, n := range names {
				require.True(t, exported[n], "panel %q names %q, which package metrics does not export", p.Title, n)
				used[n] = true
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for i, a := range d.Panels {
		for _, b := range d.Panels[i+1:] {
			overlap := a.GridPos.X < b.GridPos.X+b.GridPos.W && b.GridPos.X < a.GridPos.X+a.GridPos.W &&
				a.GridPos.Y < b.GridPos.Y+b.GridPos.H && b.GridPos.Y < a.GridPos.Y+a.GridPos.H
			require.False(t, overlap, "panels %q and %q overlap", a.Title, b.Title)
		}
	}
	for _, topic := range []string{"backlog", "oldest", "throughput", "success rate", "latency", "retries", "dead",
		"destination up", "slot lag", "slot active", "slot wal status"} {
		require.True(t, slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, topic) }),
			"no panel about %s", topic)
	}
	for _, q := range []string{"0.5", "0.9", "0.99"} {
		require.True(t, slices.ContainsFunc(exprs, func(e string) bool {
			return strings.HasPrefix(e, "histogram_quantile("+q+",") && strings.Contains(e, "outbox_relay_delivery_latency_seconds_bucket")
		}), "no p%s delivery latency", q)
	}
	for n := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		require.True(t, used[n] || used[base+"_bucket"] || used[base+"_sum"],
			"the dashboard shows nothing of %s", base)
	}

	t.Run("PromtoolParsesEveryQuery", func(t *testing.T) {
		bin := promtool(t)
		// Each query, with Grafana's variables filled in, as a recording rule promtool must parse.
		fill := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$relay", ".*")
		var rules strings.Builder
		rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
		for i, e := range exprs {
			q, err := json.Marshal(fill.Replace(e))
			require.NoError(t, err)
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
		}
		path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
		require.NoError(t, os.WriteFile(path, []byte(rules.String()), 0o644))
		out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
		require.NoError(t, err, "promtool:\n%s", out)
	})
}
