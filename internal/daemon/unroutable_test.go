package daemon

import (
	"context"
	"database/sql"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
)

// amqpChannel opens a channel of the test's own on RabbitMQ, closed when t ends.
func amqpChannel(t *testing.T) (url string, ch *amqp.Channel) {
	t.Helper()
	url = testsvc.AMQPURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		testsvc.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err = conn.Channel()
	require.NoError(t, err)
	return url, ch
}

// rowState is the status and failed-attempt count of the row of message id.
func rowState(t *testing.T, db *sql.DB, table, id string) (status, retries int) {
	t.Helper()
	require.NoError(t, db.QueryRow("SELECT status, retry_count FROM "+table+" WHERE message_id = ?", id).
		Scan(&status, &retries))
	return status, retries
}

// A message whose routing key no queue is bound to yet (312 NO_ROUTE) is
// retried with backoff, not dead, and reaches the queue once it is declared.
func TestUnroutableIsRetriedUntilAQueueIsBound(t *testing.T) {
	t.Parallel()
	url, ch := amqpChannel(t)
	queue := testsvc.Name(t)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })

	dsn, db, store := sqliteDB(t)
	cfg := baseConfig(dsn, config.Broker{Name: "rabbit", URL: config.NewSecret(url)})
	cfg.MaxAttempts = 1000
	cfg.BackoffBase = 20 * time.Millisecond
	cfg.BackoffCap = 100 * time.Millisecond
	_, _, _ = startLogged(t, cfg)
	m := writeSQLite(t, db, store, queue, 1)[0] // the default exchange routes by queue name

	testsvc.Eventually(t, 20*time.Second, func() bool {
		status, retries := rowState(t, db, cfg.Table, m.MessageID)
		require.Equal(t, 0, status, "pending, never dead (attempts so far: %d)", retries)
		return retries >= 3
	}, "the unroutable message is tried again and again")

	_, err := ch.QueueDeclare(queue, false, true, false, false, nil)
	require.NoError(t, err)
	testsvc.Eventually(t, 20*time.Second, func() bool {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if ok {
			require.Equal(t, m.MessageID, d.MessageId)
		}
		return ok
	}, "the queue bound later receives the message")
	testsvc.Eventually(t, 10*time.Second, func() bool {
		status, _ := rowState(t, db, cfg.Table, m.MessageID)
		return status == 1
	}, "the row is marked sent")
}

// A route with unroutable: dead marks such a message dead at its first
// attempt, whether it is a route of its own or the default route.
func TestUnroutableDeadWhenTheRouteSaysSo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		routes func(cfg *config.Config, strictEvent string)
	}{
		{"Route", func(cfg *config.Config, strictEvent string) {
			cfg.Routes = []config.Route{{EventType: strictEvent, Broker: "rabbit", Unroutable: config.UnroutableDead}}
			cfg.DefaultRoute = &config.Route{Broker: "rabbit"}
		}},
		{"DefaultRoute", func(cfg *config.Config, _ string) {
			cfg.DefaultRoute = &config.Route{Broker: "rabbit", Unroutable: config.UnroutableDead}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, _ := amqpChannel(t)
			event := testsvc.Name(t) // no queue of that name
			dsn, db, store := sqliteDB(t)
			cfg := baseConfig(dsn, config.Broker{Name: "rabbit", URL: config.NewSecret(url)})
			cfg.MaxAttempts = 1000
			tc.routes(cfg, event)
			_, _, _ = startLogged(t, cfg)
			m := writeSQLite(t, db, store, event, 1)[0]

			var dead []outbox.DeadMessage
			testsvc.Eventually(t, 20*time.Second, func() bool {
				var err error
				dead, err = store.ListDead(context.Background(), outbox.DeadFilter{Limit: 10})
				require.NoError(t, err)
				return len(dead) == 1
			}, "the message dies")
			require.Equal(t, m.MessageID, dead[0].Message.MessageID)
			require.Equal(t, 1, dead[0].Attempts, "at its first attempt")
			require.Contains(t, dead[0].Reason, "unroutable is permanent on this route")
			require.Contains(t, dead[0].Reason, "312 NO_ROUTE: no queue bound to exchange")
		})
	}
}
