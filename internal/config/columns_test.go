package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestColumnsFromFile(t *testing.T) {
	t.Parallel()
	c, err := loadFile(t, "good_columns.yaml", noEnv)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, map[string]string{"message_id": "id", "aggregate_type": "aggregatetype",
		"aggregate_id": "aggregateid", "event_type": "type", "payload": "payload"}, c.Columns)
	require.True(t, c.LogOnly())
	require.Equal(t, "public.outbox_dead", c.CDCDeadTableName())
	require.False(t, c.ArchiveScheduled(), "a log-only table is not archived")
	c.Columns["id"], c.Columns["status"], c.Columns["retry_count"] = "seq", "state", "tries"
	c.Columns["next_retry_at"], c.Columns["created_at"], c.Columns["updated_at"] = "due", "created", "changed"
	require.False(t, c.LogOnly())
	require.True(t, c.ArchiveScheduled(), "a mapped table that keeps its rows is archived")
}

func TestValidateColumns(t *testing.T) {
	t.Parallel()
	debezium := func() map[string]string {
		return map[string]string{"message_id": "id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
			"event_type": "type", "payload": "payload"}
	}
	kept := func() map[string]string {
		m := debezium()
		for k, v := range map[string]string{"id": "seq", "message_id": "event_id", "status": "state", "retry_count": "tries",
			"next_retry_at": "due_at", "created_at": "written_at", "updated_at": "changed_at"} {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   []string // none: valid
	}{
		{"Debezium", func(c *Config) {}, nil},
		{"DeadTable", func(c *Config) { c.CDCDeadTable = "app.dead_letters" }, nil},
		{"KeptState", func(c *Config) { c.Columns = kept(); c.DeleteSent = true }, nil},
		{"PollingKeptState", func(c *Config) { c.Source = SourcePolling; c.Columns = kept() }, nil},
		{"PollingLogOnly", func(c *Config) { c.Source = SourcePolling },
			[]string{"columns: a log-only mapping (no state columns) needs source: cdc"}},
		{"PollingMySQL", func(c *Config) {
			c.Source, c.Columns, c.DB = SourcePolling, kept(), NewSecret("mysql://u:pw@localhost:3306/db")
		}, nil},
		{"PollingSQLite", func(c *Config) {
			c.Source, c.Columns, c.DB = SourcePolling, kept(), NewSecret("sqlite:///tmp/x.db")
		}, nil},
		{"BatchLeaseKeptState", func(c *Config) { c.Columns = kept(); c.BatchLease = true },
			[]string{"batch_lease: not available with a columns: mapping yet"}},
		{"HeldClaimsKeptState", func(c *Config) { c.Source, c.Columns, c.HeldClaims, c.Ordering = SourcePolling, kept(), true, false }, nil},
		{"NotifyTriggerKeptState", func(c *Config) { c.Source = SourcePolling; c.Columns = kept(); c.NotifyTrigger = true },
			[]string{"notify_trigger: not available with a columns: mapping yet"}},
		{"RequiredLeftOut", func(c *Config) { delete(c.Columns, "payload"); delete(c.Columns, "aggregate_id") },
			[]string{"columns: required columns not mapped: aggregate_id, payload"}},
		{"UnknownAndBadName", func(c *Config) { c.Columns["trace"] = "tracingspancontext"; c.Columns["topic"] = "Topic" },
			[]string{`columns: "trace" is not a column of the table contract`, `columns: topic: "Topic" is not a lower-case SQL identifier`}},
		{"StateInPart", func(c *Config) { c.Columns["status"] = "state" },
			[]string{"columns: state columns mapped in part: status mapped"}},
		{"DeleteSentLogOnly", func(c *Config) { c.DeleteSent = true },
			[]string{"delete_sent: a log-only table (columns: maps no state columns) is never written to"}},
		{"DeadTableWithState", func(c *Config) { c.Columns = kept(); c.CDCDeadTable = "d" },
			[]string{"cdc_dead_table: only with a log-only columns: mapping; with state columns"}},
		{"DeadTableWithoutColumns", func(c *Config) { c.Columns = nil; c.CDCDeadTable = "d" },
			[]string{"cdc_dead_table: only with a log-only columns: mapping (no state columns)"}},
		{"DeadTableBadName", func(c *Config) { c.CDCDeadTable = "a b" }, []string{`cdc_dead_table: "a b" is not a table`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			c.DB = NewSecret("postgres://u:pw@localhost/db")
			c.Broker = NewSecret("nats://127.0.0.1:4222")
			c.Source = SourceCDC
			c.Columns = debezium()
			tc.change(c)
			err := c.Validate()
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				require.True(t, found, "%q not in:\n%s", w, err)
			}
		})
	}
}
