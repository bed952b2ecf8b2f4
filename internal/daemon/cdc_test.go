package daemon

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/pgstore"
)

// TestRunPostgresCDCToNATS runs the daemon with source cdc: rows written
// before its slot existed are polled, later ones streamed, kept rows are
// marked sent, rows the writer deleted go out too, and the cdc metrics are
// served.
func TestRunPostgresCDCToNATS(t *testing.T) {
	t.Parallel()
	pool, schema, dsn := testsvc.PostgresSchema(t)
	stream := newNATSStream(t)
	ctx := context.Background()
	st, err := pgstore.New(pool)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	slot, pub := testsvc.ReplicationSlot(t, schema)

	write := func(w *outbox.Writer[pgx.Tx], n int) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		for range n {
			require.NoError(t, w.Write(ctx, tx, &outbox.Message{AggregateType: "order", AggregateID: "o-1",
				EventType: "ORDER_SHIPPED", Payload: []byte(`{}`)}))
		}
		require.NoError(t, tx.Commit(ctx))
	}
	write(outbox.NewWriter(st), 20) // before the slot: caught up by polling

	cfg := baseConfig(config.NewSecret(dsn), stream.broker("events"))
	cfg.Source, cfg.CDCSlot, cfg.CDCPublication = config.SourceCDC, slot, pub
	cfg.HTTP = "127.0.0.1:0"
	d, err := New(cfg, nil)
	require.NoError(t, err)
	stop := running(t, d)
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 20 }, "the backlog is not sent")

	write(outbox.NewWriter(st), 10)
	write(outbox.NewWriter(st, outbox.WithDeleteAfterInsert()), 10)
	testsvc.Eventually(t, 20*time.Second, func() bool { return stream.count(t) == 40 }, "the stream is not sent")
	var sent int
	testsvc.Eventually(t, 10*time.Second, func() bool {
		return pool.QueryRow(ctx, "SELECT count(*) FROM outbox_message WHERE status = 1").Scan(&sent) == nil && sent == 30
	}, "kept rows not marked sent")

	resp, err := http.Get(d.HTTPURL() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `outbox_cdc_mode{relay="`+cfg.Name+`",slot="`+slot+`"} 0`)
	require.Contains(t, string(body), "outbox_cdc_switches_total")
	require.NoError(t, stop())
}
