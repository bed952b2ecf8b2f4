package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/publisher/amqppub"
	"github.com/outboxkit/outbox/publisher/kafkapub"
	"github.com/outboxkit/outbox/publisher/mqttpub"
	"github.com/outboxkit/outbox/publisher/natspub"
	"github.com/outboxkit/outbox/publisher/redispub"
	"github.com/outboxkit/outbox/publisher/webhookpub"
)

// brokerParams are what a broker opener needs besides the broker's own config.
type brokerParams struct {
	publishTimeout time.Duration
	log            *slog.Logger
	red            *redact.Redactor // what every publish and ping error is cleaned of
	raw            map[string]bool  // brokers whose webhook or MQTT publisher sends payloads raw (CloudEvents)
}

// openBroker is an open destination: its publisher and what closes it.
type openBroker struct {
	name   string
	scheme string
	pub    outbox.Publisher
	close  func()
}

// brokerOpener connects to one kind of broker. The URL's password must not
// reach the returned error: callers scrub it anyway.
type brokerOpener func(ctx context.Context, b *config.Broker, p brokerParams) (outbox.Publisher, func(), error)

// brokerOpeners is the scheme registry of brokers. config.BrokerSchemes lists
// the same schemes for validation; a test keeps the two in step.
var brokerOpeners = map[string]brokerOpener{
	"nats":   openNATS,
	"kafka":  openKafka,
	"amqp":   openAMQP,
	"amqps":  openAMQP,
	"redis":  openRedis,
	"rediss": openRedis,
	"http":   openWebhook,
	"https":  openWebhook,
	"mqtt":   openMQTT,
	"mqtts":  openMQTT,
}

// openBrokers connects to every broker and checks that each answers a ping
// within the ping timeout, so that a wrong address stops the daemon at once
// with the reason. (Outages after the start are the relay's business: it
// pauses and probes.) On error it closes what it opened.
func openBrokers(ctx context.Context, brokers []config.Broker, p brokerParams) ([]openBroker, error) {
	var opened []openBroker
	fail := func(err error) ([]openBroker, error) {
		closeBrokers(opened)
		return nil, err
	}
	for i := range brokers {
		b := &brokers[i]
		scheme := b.URL.Scheme()
		open, ok := brokerOpeners[scheme]
		if !ok {
			return fail(fmt.Errorf("broker %s: unknown scheme %q; want %s", b.Name, scheme, schemes(brokerOpeners)))
		}
		pub, closeFn, err := open(ctx, b, brokerParams{publishTimeout: p.publishTimeout,
			log: p.log.With("broker", b.Name), raw: p.raw})
		if err != nil {
			return fail(scrub(fmt.Errorf("broker %s: %w", b.Name, err), brokerSecrets(b)...))
		}
		pub = redactErrors(pub, p.red)
		opened = append(opened, openBroker{name: b.Name, scheme: scheme, pub: pub, close: closeFn})
		if pinger, ok := pub.(outbox.Pinger); ok {
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := pinger.Ping(pctx)
			cancel()
			if err != nil {
				return fail(scrub(fmt.Errorf("broker %s: %w", b.Name, err), brokerSecrets(b)...))
			}
		}
	}
	return opened, nil
}

// closeBrokers closes brokers in the reverse order of opening.
func closeBrokers(brokers []openBroker) {
	for _, b := range slices.Backward(brokers) {
		if b.close != nil {
			b.close()
		}
	}
}

// openNATS connects to NATS, ensures the JetStream stream that captures the
// broker's subjects (creating it, or adding missing subjects), and publishes
// with the broker's subject prefix. The connection reconnects forever.
func openNATS(ctx context.Context, b *config.Broker, p brokerParams) (outbox.Publisher, func(), error) {
	log := p.log
	nc, err := nats.Connect(b.URL.Value(),
		nats.Name("outbox-relay"),
		nats.Timeout(pingTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
		// Without a handler nats.go prints asynchronous errors (a slow
		// consumer, a permissions violation) raw to stderr.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("nats async error", "error", err.Error())
		}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(max(p.publishTimeout, time.Second)))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := natspub.EnsureStream(sctx, js, b.EffectiveStream(), b.EffectiveSubjects(), b.EffectiveDuplicateWindow()); err != nil {
		nc.Close()
		return nil, nil, err
	}
	pub, err := natspub.New(js, natspub.WithSubjectPrefix(b.EffectivePrefix()))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return pub, nc.Close, nil
}

// openKafka builds a franz-go client from the kafka:// URL (see
// kafkapub.ClientOptions for its parameters: TLS, SASL, client id).
func openKafka(_ context.Context, b *config.Broker, _ brokerParams) (outbox.Publisher, func(), error) {
	cl, err := kafkapub.NewClient(b.URL.Value())
	if err != nil {
		return nil, nil, err
	}
	pub, err := kafkapub.New(cl, kafkapub.WithTopicPrefix(b.EffectivePrefix()))
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return pub, cl.Close, nil
}

// openAMQP starts a RabbitMQ publisher (confirms, mandatory, persistent),
// which keeps its own connection and reconnects on its own.
func openAMQP(_ context.Context, b *config.Broker, p brokerParams) (outbox.Publisher, func(), error) {
	pub, err := amqppub.Dial(b.URL.Value(),
		amqppub.WithExchange(b.Exchange),
		amqppub.WithRoutingKeyPrefix(b.EffectivePrefix()),
		amqppub.WithLogger(p.log))
	if err != nil {
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close() }, nil
}

// openRedis appends to Redis Streams (stream key = prefix + destination),
// trimming with MAXLEN ~ max_len and deduplicating for dedup_ttl when set.
func openRedis(_ context.Context, b *config.Broker, _ brokerParams) (outbox.Publisher, func(), error) {
	client, err := redispub.NewClient(b.URL.Value())
	if err != nil {
		return nil, nil, err
	}
	opts := []redispub.Option{redispub.WithStreamPrefix(b.EffectivePrefix())}
	if b.MaxLen > 0 {
		opts = append(opts, redispub.WithMaxLen(b.MaxLen))
	}
	if b.DedupTTL > 0 {
		opts = append(opts, redispub.WithDedup(b.DedupTTL))
	}
	pub, err := redispub.New(client, opts...)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close(); _ = client.Close() }, nil
}

// openWebhook POSTs to the URL ({destination} in it is replaced by each
// message's destination), signing with the secret when set.
func openWebhook(_ context.Context, b *config.Broker, p brokerParams) (outbox.Publisher, func(), error) {
	opts := []webhookpub.Option{webhookpub.WithRawBody(p.raw[b.Name])}
	if !b.Secret.IsZero() {
		opts = append(opts, webhookpub.WithSecret(b.Secret.Value()))
	}
	if b.Concurrency > 0 {
		opts = append(opts, webhookpub.WithConcurrency(b.Concurrency))
	}
	if b.Batch > 0 {
		opts = append(opts, webhookpub.WithBatch(b.Batch))
	}
	if b.PermanentStatus != nil {
		opts = append(opts, webhookpub.WithPermanentStatus(b.PermanentStatus...))
	}
	for _, name := range slices.Sorted(maps.Keys(b.Headers)) {
		opts = append(opts, webhookpub.WithHeader(name, b.Headers[name].Value()))
	}
	pub, err := webhookpub.New(b.URL.Value(), opts...)
	if err != nil {
		return nil, nil, err
	}
	return pub, nil, nil
}

// openMQTT connects a Paho client (QoS 1, reconnecting on its own) and
// publishes to prefix + destination.
func openMQTT(ctx context.Context, b *config.Broker, p brokerParams) (outbox.Publisher, func(), error) {
	cctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	client, err := mqttpub.Connect(cctx, b.URL.Value())
	if err != nil {
		return nil, nil, err
	}
	pub, err := mqttpub.New(client, mqttpub.WithTopicPrefix(b.EffectivePrefix()), mqttpub.WithRawPayload(p.raw[b.Name]))
	if err != nil {
		client.Disconnect(250)
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close(); client.Disconnect(250) }, nil
}

// schemes lists a registry's schemes for an error message.
func schemes[V any](registry map[string]V) string {
	keys := slices.Sorted(maps.Keys(registry))
	for i, k := range keys {
		keys[i] = k + "://"
	}
	return strings.Join(keys, ", ")
}
