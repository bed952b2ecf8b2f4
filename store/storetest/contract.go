package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

func (s *suite) malformed(t *testing.T) {
	f := s.contract(t)
	type plant struct {
		name                                           string
		messageID, aggregateType, aggregateID, evtType any
		payload                                        any
	}
	plants := []plant{
		{"NullMessageID", nil, "order", "1", "E", `{}`},
		{"NullAggregateType", "m-2", nil, "2", "E", `{}`},
		{"NullAggregateID", "m-3", "order", nil, "E", `{}`},
		{"NullEventType", "m-4", "order", "4", nil, `{}`},
		{"NullPayload", "m-5", "order", "5", "E", nil},
		// Empty text in a required column: no message id to dedupe by, no
		// event type to route by.
		{"EmptyMessageID", "", "order", "7", "E", `{}`},
		{"EmptyEventType", "m-8", "order", "8", "", `{}`},
	}
	if s.h.InvalidJSON {
		plants = append(plants, plant{"PayloadNotJSON", "m-6", "order", "6", "E", `{not json`})
	}

	good := []int64{f.write(newMsg("order", "good", 1))[0]}
	bad := map[int64]string{}
	for _, p := range plants {
		f.exec("INSERT INTO {t} (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)",
			p.messageID, p.aggregateType, p.aggregateID, p.evtType, p.payload)
		bad[f.maxID()] = p.name
	}
	good = append(good, f.write(newMsg("order", "good", 2))[0])

	c := f.claimN(100)
	require.Equal(t, good, rowIDs(c.Messages), "the well-formed rows come back as messages")
	require.Len(t, c.Malformed, len(bad))
	var dead []*outbox.Message
	for _, mr := range c.Malformed {
		require.NotNil(t, mr.Message, "Malformed row without a Message")
		name, ok := bad[mr.Message.RowID]
		require.True(t, ok, "row %d reported malformed, it is not one of the planted rows", mr.Message.RowID)
		require.Error(t, mr.Err, name)
		require.Equal(t, 1, mr.Message.Attempt, name)
		dead = append(dead, mr.Message)
		delete(bad, mr.Message.RowID)
	}
	require.Empty(t, bad, "planted rows missing from Claim.Malformed")

	f.kill("malformed", dead...)
	require.Equal(t, 2, f.ack(false, c.Messages...))
	for _, m := range dead {
		require.Equal(t, 2, f.row(m.RowID).Status, "malformed row %d killed", m.RowID)
	}
	for _, id := range good {
		require.Equal(t, 1, f.row(id).Status, "good row %d sent", id)
	}
}

func (s *suite) contractOnly(t *testing.T) {
	f := s.contract(t)
	in := roundTripMessages()
	before := time.Now()
	ids := f.write(in...)

	c := f.claimN(10)
	require.Empty(t, c.Malformed)
	require.Equal(t, ids, rowIDs(c.Messages))
	for i, want := range in {
		got := c.Messages[i]
		require.Equal(t, want.MessageID, got.MessageID, "message %d", i)
		require.Equal(t, want.AggregateType, got.AggregateType, "message %d", i)
		require.Equal(t, want.AggregateID, got.AggregateID, "message %d", i)
		require.Equal(t, want.EventType, got.EventType, "message %d", i)
		require.JSONEq(t, string(want.Payload), string(got.Payload), "message %d", i)
		require.Empty(t, got.Topic, "no topic column")
		require.Empty(t, got.PartitionKey, "no partition_key column")
		require.Empty(t, got.Headers, "no headers column")
		require.Equal(t, 1, got.Attempt)
		near(t, before, got.CreatedAt, time.Minute, "CreatedAt")
	}

	ms := c.Messages
	require.Equal(t, 1, f.ack(false, ms[0]))
	f.reschedule(false, time.Now().Add(time.Hour), "later", ms[1])
	f.kill("poison", ms[2])
	require.Zero(t, f.ack(false, withAttempt(ms[3], 9)), "fenced")

	for i, want := range []int{1, 0, 2, 0} {
		require.Equal(t, want, f.row(ids[i]).Status, "row %d", i)
	}
	require.Empty(t, f.claimN(10).Messages, "all leased or waiting")

	st, err := f.Store.Stats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Pending)
	require.EqualValues(t, 1, st.Dead)
	require.EqualValues(t, 1, st.SentLastMinute)
	require.EqualValues(t, 1, st.SentLastHour)
	require.Less(t, st.OldestPending, time.Minute)

	f.expire(ids[1])
	again := f.claimN(10).Messages
	require.Equal(t, ids[1:2], rowIDs(again))
	require.Equal(t, 2, again[0].Attempt)
	require.Equal(t, 1, f.ack(true, again[0]), "delete-ack")
	require.EqualValues(t, 3, f.count(""))
}
