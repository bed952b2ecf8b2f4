package colmap_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/colmap"
)

// debezium maps the table of Debezium's outbox event router documentation.
var debezium = colmap.Map{"message_id": "id", "aggregate_type": "aggregatetype", "aggregate_id": "aggregateid",
	"event_type": "type", "payload": "payload"}

// renamed maps a table that keeps the state columns under other names.
var renamed = colmap.Map{"id": "seq", "message_id": "event_id", "aggregate_type": "kind", "aggregate_id": "entity",
	"event_type": "name", "payload": "body", "status": "state", "retry_count": "tries", "next_retry_at": "due_at",
	"created_at": "written_at", "updated_at": "changed_at", "last_error": "why"}

func with(m colmap.Map, k, v string) colmap.Map {
	c := colmap.Map{}
	for a, b := range m {
		c[a] = b
	}
	if v == "" {
		delete(c, k)
	} else {
		c[k] = v
	}
	return c
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		m       colmap.Map
		logOnly bool
		errs    []string // each must be in the error; none: valid
	}{
		{name: "none", m: nil},
		{name: "debezium", m: debezium, logOnly: true},
		{name: "debezium with its timestamp", m: with(debezium, "created_at", "timestamp"), logOnly: true},
		{name: "renamed with state", m: renamed},
		{name: "unknown key", m: with(debezium, "tracingspancontext", "tracingspancontext"), logOnly: true,
			errs: []string{`"tracingspancontext" is not a column of the table contract`}},
		{name: "bad identifier", m: with(debezium, "topic", "Topic Name"), logOnly: true,
			errs: []string{`topic: "Topic Name" is not a lower-case SQL identifier`}},
		{name: "required left out", m: with(with(debezium, "payload", ""), "event_type", ""), logOnly: true,
			errs: []string{"required columns not mapped: event_type, payload"}},
		{name: "two on one column", m: with(debezium, "partition_key", "aggregateid"), logOnly: true,
			errs: []string{"aggregate_id, partition_key all map to column aggregateid"}},
		{name: "state in part", m: with(with(renamed, "retry_count", ""), "updated_at", ""),
			errs: []string{"state columns mapped in part: id, status, next_retry_at, created_at mapped, retry_count, updated_at not"}},
		{name: "last_error without state", m: with(debezium, "last_error", "err"), logOnly: true,
			errs: []string{"last_error needs the state columns"}},
		{name: "every problem at once", m: colmap.Map{"payload": "p", "nope": "x", "status": "s"},
			errs: []string{`"nope" is not`, "required columns not mapped: message_id", "state columns mapped in part"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.m.Validate()
			if len(tc.errs) == 0 {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				for _, e := range tc.errs {
					require.Contains(t, err.Error(), e)
				}
			}
			require.Equal(t, tc.logOnly, tc.m.LogOnly())
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	table := []string{"payload", "id", "aggregatetype", "aggregateid", "type", "timestamp", "tracingspancontext"}
	for _, tc := range []struct {
		name string
		m    colmap.Map
		errs []string
	}{
		{name: "all there", m: debezium},
		{name: "optional there", m: with(debezium, "created_at", "timestamp")},
		{name: "misspelt", m: with(debezium, "aggregate_type", "aggregate_type"),
			errs: []string{"aggregate_type -> aggregate_type", "table public.outbox does not have",
				"the table has: aggregateid, aggregatetype, id, payload, timestamp, tracingspancontext, type",
				"{message_id: id, aggregate_type: aggregate_type, aggregate_id: aggregateid, event_type: type, payload: payload}"}},
		{name: "optional missing", m: with(debezium, "headers", "hdrs"), errs: []string{"(headers -> hdrs)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.m.Check("public.outbox", table)
			if len(tc.errs) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, e := range tc.errs {
				require.Contains(t, err.Error(), e)
			}
		})
	}
}

func TestColumn(t *testing.T) {
	t.Parallel()
	c, ok := colmap.Map(nil).Column("status")
	require.True(t, ok)
	require.Equal(t, "status", c)
	c, ok = debezium.Column("message_id")
	require.True(t, ok)
	require.Equal(t, "id", c)
	_, ok = debezium.Column("status")
	require.False(t, ok)
	require.Equal(t, "message_id", debezium.Reverse()["id"])
}
