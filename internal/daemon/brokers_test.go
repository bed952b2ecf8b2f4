package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/publisher/webhookpub"
)

func TestNewChecksRoutes(t *testing.T) {
	t.Parallel()
	dsn := config.NewSecret("sqlite://x.db")
	brokers := []config.Broker{{Name: "a", URL: config.NewSecret("nats://h")}, {Name: "b", URL: config.NewSecret("kafka://h")}}
	for _, tc := range []struct {
		name         string
		routes       []config.Route
		defaultRoute *config.Route
		want         string
	}{
		{"TemplateFunctions", []config.Route{{EventType: "ORDER_*", Broker: "b", Topic: "{{lower .AggregateType}}.{{.EventType}}"}},
			&config.Route{Broker: "a"}, ""},
		{"UnknownField", []config.Route{{EventType: "ORDER_*", Broker: "b", Topic: "{{.Nope}}"}}, nil,
			`route 1 (routes[0]): topic template "{{.Nope}}"`},
		{"BadSyntax", nil, &config.Route{Broker: "a", Topic: "{{.EventType"}, `route 1 (default_route): topic template`},
		{"UnknownFunction", nil, &config.Route{Broker: "a", Topic: "{{shout .EventType}}"}, `function "shout" not defined`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := baseConfig(dsn, brokers...)
			c.Routes, c.DefaultRoute = tc.routes, tc.defaultRoute
			_, err := New(c, nil)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// Routes send each message to its broker under its templated topic, and a
// message no route takes is marked dead with the reason, not dropped.
func TestRunRoutesToSeveralBrokers(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	stream := newNATSStream(t)
	ropt, err := redis.ParseURL(testsvc.RedisURL(t))
	require.NoError(t, err)
	rdb := redis.NewClient(ropt)
	t.Cleanup(func() { rdb.Close() })
	rprefix := testsvc.Name(t) + ":"
	t.Cleanup(func() { rdb.Del(context.Background(), rprefix+"PARTNER_SIGNED") })

	redisPrefix := rprefix
	cfg := baseConfig(dsn, stream.broker("events"),
		config.Broker{Name: "partners", URL: config.NewSecret(testsvc.RedisURL(t)), Prefix: &redisPrefix, DedupTTL: time.Hour})
	cfg.Routes = []config.Route{
		{EventType: "PARTNER_*", Broker: "partners"},
		{AggregateType: "order", Broker: "events", Topic: "{{lower .AggregateType}}.{{.EventType}}"},
	}
	d, err := New(cfg, nil)
	require.NoError(t, err)

	ctx := context.Background()
	msgs := []*outbox.Message{
		{AggregateType: "partner", AggregateID: "p-1", EventType: "PARTNER_SIGNED", Payload: []byte(`{}`)},
		{AggregateType: "order", AggregateID: "o-1", EventType: "ORDER_PAID", Payload: []byte(`{}`)},
		{AggregateType: "invoice", AggregateID: "i-1", EventType: "INVOICE_SENT", Payload: []byte(`{}`)},
	}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](store).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())

	stop := running(t, d)
	testsvc.Eventually(t, 20*time.Second, func() bool {
		st, err := store.Stats(ctx)
		return err == nil && st.Pending == 0
	}, "every message handled")
	require.NoError(t, stop())

	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Dead, "the unrouted message is dead")
	require.EqualValues(t, 2, st.SentLastMinute)
	var reason string
	require.NoError(t, db.QueryRow("SELECT last_error FROM outbox_message WHERE status = 2").Scan(&reason))
	require.Contains(t, reason, `no route for event type "INVOICE_SENT"`)

	entries, err := rdb.XRange(ctx, rprefix+"PARTNER_SIGNED", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, msgs[0].MessageID, entries[0].Values["message_id"])

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := stream.js.Stream(sctx, stream.name)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(sctx, stream.prefix+"order.ORDER_PAID")
	require.NoError(t, err, "the template made the subject")
	require.Equal(t, msgs[1].MessageID, m.Header.Get("Nats-Msg-Id"))
}

func TestRunKafka(t *testing.T) {
	t.Parallel()
	dsn, db, store := sqliteDB(t)
	topic := testsvc.Name(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "outbox."+topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)

	prefix := "outbox."
	cfg := baseConfig(dsn, config.Broker{Name: "log", URL: config.NewSecret("kafka://" + strings.Join(c.ListenAddrs(), ",")), Prefix: &prefix})
	d, err := New(cfg, nil)
	require.NoError(t, err)
	msgs := writeSQLite(t, db, store, topic, 5)
	stop := running(t, d)

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("outbox."+topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[string]string{} // message id -> key
	for len(got) < len(msgs) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == outbox.HeaderMessageID {
					got[string(h.Value)] = string(r.Key)
				}
			}
		})
	}
	require.NoError(t, stop())
	want := map[string]string{}
	for _, m := range msgs {
		want[m.MessageID] = m.AggregateID
	}
	require.Equal(t, want, got, "each message once, keyed by its aggregate")
}

func TestRunAMQP(t *testing.T) {
	t.Parallel()
	url := testsvc.AMQPURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		testsvc.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := testsvc.Name(t)
	_, err = ch.QueueDeclare(queue, false, true, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })

	dsn, db, store := sqliteDB(t)
	// The default exchange routes by queue name: the event type is the queue.
	cfg := baseConfig(dsn, config.Broker{Name: "rabbit", URL: config.NewSecret(url)})
	d, err := New(cfg, nil)
	require.NoError(t, err)
	msgs := writeSQLite(t, db, store, queue, 3)
	stop := running(t, d)

	var got []string
	testsvc.Eventually(t, 20*time.Second, func() bool {
		m, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if ok {
			got = append(got, m.MessageId)
		}
		return len(got) == len(msgs)
	}, "the queue gets the %d messages", len(msgs))
	require.NoError(t, stop())
	for i, m := range msgs {
		require.Equal(t, m.MessageID, got[i], fmt.Sprintf("message %d", i))
	}
}

func TestRunWebhook(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	type request struct {
		path, idempotencyKey, apiKey string
		verified                     error
	}
	got := make(chan request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost { // the start-up ping is a HEAD
			return
		}
		body, _ := io.ReadAll(r.Body)
		got <- request{path: r.URL.Path, idempotencyKey: r.Header.Get("Idempotency-Key"),
			apiKey: r.Header.Get("X-Api-Key"), verified: webhookpub.Verify(secret, r.Header, body)}
	}))
	t.Cleanup(srv.Close)

	dsn, db, store := sqliteDB(t)
	cfg := baseConfig(dsn, config.Broker{Name: "partner", URL: config.NewSecret(srv.URL + "/hooks/{destination}"),
		Secret: config.NewSecret(secret), Concurrency: 2,
		Headers: map[string]config.Secret{"X-Api-Key": config.NewSecret("key-123")}})
	d, err := New(cfg, nil)
	require.NoError(t, err)
	msgs := writeSQLite(t, db, store, "PARTNER_SIGNED", 2)
	stop := running(t, d)

	for range msgs {
		select {
		case r := <-got:
			require.Equal(t, "/hooks/PARTNER_SIGNED", r.path)
			require.NoError(t, r.verified, "signed with the secret")
			require.Equal(t, "key-123", r.apiKey)
			require.Contains(t, []string{msgs[0].MessageID, msgs[1].MessageID}, r.idempotencyKey)
		case <-time.After(20 * time.Second):
			t.Fatal("no webhook request within 20 s")
		}
	}
	require.NoError(t, stop())
}

// A webhook broker's permanent_status decides whether a refusal kills the
// message at once: 401 is retried by default, and dead when listed.
func TestRunWebhookPermanentStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		permanent []int
		wantDead  bool
	}{
		{"DefaultRetries401", nil, false},
		{"Listed401IsDead", []int{401}, true},
		{"EmptyListRetriesAll", []int{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var posts atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					posts.Add(1)
					w.WriteHeader(http.StatusUnauthorized)
				}
			}))
			t.Cleanup(srv.Close)
			dsn, db, store := sqliteDB(t)
			cfg := baseConfig(dsn, config.Broker{Name: "partner", URL: config.NewSecret(srv.URL + "/hooks"),
				PermanentStatus: tc.permanent})
			cfg.BackoffBase, cfg.BackoffCap = 10*time.Millisecond, 20*time.Millisecond
			d, err := New(cfg, nil)
			require.NoError(t, err)
			writeSQLite(t, db, store, "PARTNER_SIGNED", 1)
			stop := running(t, d)
			var status, retries int
			testsvc.Eventually(t, 20*time.Second, func() bool {
				err := db.QueryRow("SELECT status, retry_count FROM outbox_message").Scan(&status, &retries)
				return err == nil && (status == 2 || retries >= 3)
			}, "the row is dead or retried")
			require.NoError(t, stop())
			if tc.wantDead {
				require.Equal(t, 2, status)
				require.EqualValues(t, 1, posts.Load(), "dead at the first refusal")
			} else {
				require.Equal(t, 0, status, "still pending, retried")
			}
		})
	}
}

func TestRunMQTT(t *testing.T) {
	t.Parallel()
	url := testsvc.MQTTURL(t)
	prefix := testsvc.Name(t) + "/"
	recv := make(chan []byte, 10)
	opts := mqtt.NewClientOptions().AddBroker(url).SetClientID(testsvc.Name(t))
	sub := mqtt.NewClient(opts)
	tok := sub.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	t.Cleanup(func() { sub.Disconnect(100) })
	tok = sub.Subscribe(prefix+"#", 1, func(_ mqtt.Client, m mqtt.Message) { recv <- m.Payload() })
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())

	dsn, db, store := sqliteDB(t)
	mqttURL := "mqtt://" + strings.TrimPrefix(url, "tcp://")
	d, err := New(baseConfig(dsn, config.Broker{Name: "devices", URL: config.NewSecret(mqttURL), Prefix: &prefix}), nil)
	require.NoError(t, err)
	msgs := writeSQLite(t, db, store, "DEVICE_SEEN", 2)
	stop := running(t, d)

	var ids []string
	for range msgs {
		select {
		case body := <-recv:
			var env struct {
				ID string `json:"id"`
			}
			require.NoError(t, json.Unmarshal(body, &env))
			ids = append(ids, env.ID)
		case <-time.After(20 * time.Second):
			t.Fatal("no MQTT message within 20 s")
		}
	}
	require.NoError(t, stop())
	require.ElementsMatch(t, []string{msgs[0].MessageID, msgs[1].MessageID}, ids)
}
