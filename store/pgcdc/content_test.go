package pgcdc_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/outboxtest"
)

// TestStreamsContentTypesAndBytes streams messages of every kind of content
// from the log, kept and deleted by the writer: each arrives with its
// content type and its payload byte for byte, and a row that another writer
// left with a bad content type goes dead without holding the others.
func TestStreamsContentTypesAndBytes(t *testing.T) {
	t.Parallel()
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	for _, mode := range rowModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, mode.deleted)
			pub := outboxtest.NewPublisher()
			r := start(t, e.source(), pub)
			waitStreaming(t, r.src)

			in := []*outbox.Message{
				{AggregateType: "order", AggregateID: "1", EventType: "E", ContentType: "application/x-protobuf", Payload: every},
				{AggregateType: "order", AggregateID: "2", EventType: "E", ContentType: "application/octet-stream", Payload: []byte{0xff, 0xfe, 0x00, 0xc3, 0x28}},
				{AggregateType: "order", AggregateID: "3", EventType: "E", ContentType: "application/cloudevents+json", Payload: []byte(`{"a":1}`)},
				{AggregateType: "order", AggregateID: "4", EventType: "E", Payload: []byte(`{"b":2}`)},
			}
			ctx := context.Background()
			tx, err := e.pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, e.writer.Write(ctx, tx, in...))
			require.NoError(t, tx.Commit(ctx))
			_, err = e.pool.Exec(ctx, "INSERT INTO "+e.table+
				" (message_id, aggregate_type, aggregate_id, event_type, payload, content_type, payload_bytes) VALUES ('bad-type', 'order', '5', 'E', 'null', 'no media type', '\\x01')")
			require.NoError(t, err)

			var ids []string
			for _, m := range in {
				ids = append(ids, m.MessageID)
			}
			waitAll(t, pub, ids)
			got := map[string]*outbox.Message{}
			for _, m := range pub.Messages() {
				got[m.MessageID] = m
			}
			require.NotContains(t, got, "bad-type", "a row with a bad content type is not published")
			for i, want := range in {
				m := got[want.MessageID]
				require.Equal(t, want.ContentType, m.ContentType, "message %d", i)
				if want.JSONPayload() {
					require.JSONEq(t, string(want.Payload), string(m.Payload), "message %d", i)
				} else {
					require.True(t, bytes.Equal(want.Payload, m.Payload), "message %d: %x", i, m.Payload)
				}
			}
			testsvc.Eventually(t, 10*time.Second, func() bool { return e.statusCounts()[2] == 1 },
				"the bad row is not dead: %v", e.statusCounts())
		})
	}
}
