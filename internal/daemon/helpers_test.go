package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/faultproxy"
	"github.com/outboxkit/outbox/internal/testsvc"
	"github.com/outboxkit/outbox/store/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sqliteDB returns the URL of a migrated SQLite database of t's own, and the
// store a writer uses on it.
func sqliteDB(t *testing.T) (config.Secret, *sql.DB, *sqlitestore.Store) {
	t.Helper()
	path := testsvc.SQLitePath(t)
	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := sqlitestore.New(db)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return config.NewSecret("sqlite://" + path), db, s
}

// writeSQLite commits n messages of event type ev through the store's Writer.
func writeSQLite(t *testing.T, db *sql.DB, s *sqlitestore.Store, ev string, n int) []*outbox.Message {
	t.Helper()
	ctx := context.Background()
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: ev,
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, outbox.NewWriter[*sql.Tx](s).Write(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())
	return msgs
}

// natsStream is a JetStream stream of t's own on the test server: its name,
// the subject prefix that it captures, and a client to read it. It is deleted
// when t ends.
type natsStream struct {
	name, prefix, url string
	js                jetstream.JetStream
}

func newNATSStream(t *testing.T) *natsStream {
	t.Helper()
	st := testsvc.NewJetStream(t)
	return &natsStream{name: st.Name, prefix: strings.ToLower(st.Name) + ".", url: st.URL, js: st.JS}
}

// broker returns the config of a broker on this stream.
func (s *natsStream) broker(name string) config.Broker {
	prefix := s.prefix
	return config.Broker{Name: name, URL: config.NewSecret(s.url), Stream: s.name, Prefix: &prefix}
}

// proxiedBroker returns the config of a broker on this stream that the
// daemon reaches through a fault proxy, and the proxy.
func (s *natsStream) proxiedBroker(t *testing.T, name string) (config.Broker, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(s.url)
	require.NoError(t, err)
	proxy := faultproxy.New(t, u.Host)
	b := s.broker(name)
	b.URL = config.NewSecret("nats://" + proxy.Addr())
	return b, proxy
}

// count returns how many messages the stream holds (0 before it exists).
func (s *natsStream) count(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// messageIDs returns the Nats-Msg-Id of every message in the stream, in order.
func (s *natsStream) messageIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, m := range s.messages(t) {
		ids = append(ids, m.header[jetstream.MsgIDHeader])
	}
	return ids
}

// baseConfig is a valid config on db and brokers with short intervals.
func baseConfig(db config.Secret, brokers ...config.Broker) *config.Config {
	c := config.Default()
	c.DB = db
	c.Brokers = brokers
	c.PollInterval = 50 * time.Millisecond
	c.PublishTimeout = 2 * time.Second
	c.Lease = 5 * time.Second
	c.LogFormat = "text"
	return c
}

// startLogged builds a daemon from cfg that logs JSON at info level into
// logs, and runs it (see running).
func startLogged(t *testing.T, cfg *config.Config) (d *Daemon, logs *syncBuffer, stop func() error) {
	t.Helper()
	logs = &syncBuffer{}
	logger, err := NewLogger(logs, "info", "json")
	require.NoError(t, err)
	d, err = New(cfg, logger)
	require.NoError(t, err)
	return d, logs, running(t, d)
}

// running starts d.Run in the background and returns a function that stops it
// and returns Run's result. It fails t if Run ends before it is ready.
func running(t *testing.T, d *Daemon) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("daemon not ready after 30 s")
	}
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30 s of the cancel")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// getReadyz fetches d's /readyz and returns the status and body.
func getReadyz(t *testing.T, d *Daemon) (int, string) {
	t.Helper()
	res, err := http.Get(d.HTTPURL() + "/readyz")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}
