package storetest

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// publishFunc is a Publisher that confirms every message after running fn on
// the batch, which stands for what happens to the rows while they are at the
// broker.
type publishFunc func(msgs []*outbox.Message)

func (p publishFunc) Publish(_ context.Context, msgs []*outbox.Message) []error {
	p(msgs)
	return make([]error, len(msgs))
}

// A row deleted while its message is at the broker is reported as gone, not
// as fenced; a row another relay took over is fenced, with rows kept or
// deleted once sent. Each is logged as what it is.
func (s *suite) goneOrFenced(t *testing.T) {
	if _, ok := s.h.New(t).Store.(outbox.RowCounter); !ok {
		t.Skip("the store does not implement outbox.RowCounter")
	}
	for _, c := range []struct {
		name        string
		deleteSent  bool
		meanwhile   func(f *fx, id int64)
		fenced      int
		gone        int
		wantLog     string
		notInTheLog string
	}{
		{"DeletedByAnOperator", false, func(f *fx, id int64) { f.exec("DELETE FROM {t} WHERE id = ?", id) }, 0, 1,
			"rows deleted before ack by someone else", "another relay owns the rows"},
		{"DeletedByAnOperatorWithDeleteSent", true, func(f *fx, id int64) { f.exec("DELETE FROM {t} WHERE id = ?", id) }, 0, 1,
			"rows deleted before ack by someone else", "another relay owns the rows"},
		{"TakenOverByAnotherRelay", false, func(f *fx, id int64) { f.expire(id); f.claimN(10) }, 1, 0,
			"another relay owns the rows", "rows deleted before ack"},
		{"TakenOverByAnotherRelayWithDeleteSent", true, func(f *fx, id int64) { f.expire(id); f.claimN(10) }, 1, 0,
			"another relay owns the rows", "rows deleted before ack"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := s.fresh(t)
			ids := f.writeN(2)
			var logs bytes.Buffer
			pub := publishFunc(func([]*outbox.Message) { c.meanwhile(f, ids[0]) })
			r, err := outbox.NewRelay(f.Store, pub, outbox.WithDeleteSent(c.deleteSent),
				outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
			require.NoError(t, err)
			ev, err := r.Step(context.Background())
			require.NoError(t, err)
			require.Equal(t, outbox.BatchEvent{Claimed: 2, Sent: 1, Fenced: c.fenced, Gone: c.gone},
				outbox.BatchEvent{Claimed: ev.Claimed, Sent: ev.Sent, Fenced: ev.Fenced, Gone: ev.Gone})
			require.Contains(t, logs.String(), c.wantLog)
			require.NotContains(t, logs.String(), c.notInTheLog)
		})
	}
	t.Run("CountRows", func(t *testing.T) {
		t.Parallel()
		f := s.fresh(t)
		ids := f.writeN(3)
		f.exec("DELETE FROM {t} WHERE id = ?", ids[1])
		f.exec("UPDATE {t} SET status = 2 WHERE id = ?", ids[2])
		n, err := f.Store.(outbox.RowCounter).CountRows(context.Background(), append(ids, ids[2]+1000))
		require.NoError(t, err)
		require.Equal(t, 2, n, "the rows that are there, whatever their status")
	})
}
