package router_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/publisher/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is an in-memory publisher that records every batch it gets and
// answers with result (nil: all confirmed).
type recorder struct {
	mu      sync.Mutex
	batches [][]*outbox.Message
	result  func(msgs []*outbox.Message) []error
	ping    error
	pinged  int
}

func (r *recorder) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	r.mu.Lock()
	r.batches = append(r.batches, msgs)
	r.mu.Unlock()
	if r.result != nil {
		return r.result(msgs)
	}
	return make([]error, len(msgs))
}

func (r *recorder) Ping(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pinged++
	return r.ping
}

func (r *recorder) sent() []*outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*outbox.Message
	for _, b := range r.batches {
		out = append(out, b...)
	}
	return out
}

// plain publishes without implementing outbox.Pinger.
type plain struct{ recorder }

func (p *plain) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	return p.recorder.Publish(ctx, msgs)
}

func msg(eventType, aggType string) *outbox.Message {
	return &outbox.Message{
		MessageID: outbox.NewMessageID(), AggregateType: aggType, AggregateID: "a-1", EventType: eventType,
		Payload: []byte(`{}`), Headers: map[string]string{"tenant": "acme"},
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	t.Parallel()
	pubs := map[string]outbox.Publisher{"nats": &recorder{}, "kafka": &recorder{}}
	for _, tc := range []struct {
		name   string
		routes []router.Route
		pubs   map[string]outbox.Publisher
		want   []string
	}{
		{"NoRoutes", nil, pubs, []string{"no routes"}},
		{"EmptyPublisher", []router.Route{{EventType: "X"}}, pubs, []string{"route 1: publisher is empty"}},
		{"UnknownPublisher", []router.Route{{Name: "orders", EventType: "X", Publisher: "amqp"}}, pubs,
			[]string{`route 1 (orders): unknown publisher "amqp" (have "kafka", "nats")`}},
		{"NilPublisher", []router.Route{{EventType: "X", Publisher: "nats"}},
			map[string]outbox.Publisher{"nats": nil}, []string{`publisher "nats" is nil`}},
		{"BadEventPattern", []router.Route{{EventType: "ORDER_[", Publisher: "nats"}}, pubs,
			[]string{`route 1: EventType pattern "ORDER_["`, "syntax error in pattern"}},
		{"BadAggregatePattern", []router.Route{{AggregateType: "[a-", Publisher: "nats"}}, pubs,
			[]string{`route 1: AggregateType pattern "[a-"`}},
		{"TemplateDoesNotParse", []router.Route{{EventType: "X", Publisher: "nats", Topic: "orders.{{.EventType"}}, pubs,
			[]string{`route 1: topic template "orders.{{.EventType"`}},
		{"TemplateNamesNoField", []router.Route{{EventType: "X", Publisher: "nats", Topic: "orders.{{.Nope}}"}}, pubs,
			[]string{`route 1: topic template "orders.{{.Nope}}"`, "Nope"}},
		{"TemplateUnknownFunc", []router.Route{{EventType: "X", Publisher: "nats", Topic: "{{shout .EventType}}"}}, pubs,
			[]string{`function "shout" not defined`}},
		{"MatchesNothing", []router.Route{{Publisher: "nats"}}, pubs,
			[]string{"route 1: matches nothing: set EventType, AggregateType or Default"}},
		{"DefaultWithMatcher", []router.Route{{EventType: "X", Publisher: "nats", Default: true}}, pubs,
			[]string{"route 1: a default route takes no EventType or AggregateType"}},
		{"TwoDefaults", []router.Route{{Name: "a", Publisher: "nats", Default: true}, {Publisher: "kafka", Default: true}}, pubs,
			[]string{"route 2: a second default route (route 1 (a) is one already)"}},
		{"AllAtOnce", []router.Route{
			{EventType: "X"},
			{EventType: "[", Publisher: "amqp", Topic: "{{"},
			{Publisher: "nats"},
		}, pubs, []string{
			"route 1: publisher is empty",
			`route 2: unknown publisher "amqp"`,
			`route 2: EventType pattern "["`,
			`route 2: topic template "{{"`,
			"route 3: matches nothing",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := router.New(tc.routes, tc.pubs)
			require.Nil(t, r)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "router: new: "), err.Error())
			for _, want := range tc.want {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	pubs := map[string]outbox.Publisher{"nats": &recorder{}, "kafka": &recorder{}, "amqp": &recorder{}}
	r, err := router.New([]router.Route{
		{Name: "paid", EventType: "ORDER_PAID", Publisher: "kafka", Topic: "payments.{{lower .EventType}}"},
		{Name: "orders", EventType: "ORDER_*", AggregateType: "order", Publisher: "nats", Topic: "orders.{{.EventType}}"},
		{Name: "customers", AggregateType: "customer*", Publisher: "amqp"},
		{Name: "tenant", EventType: "TENANT_?", Publisher: "nats", Topic: `{{.Headers.tenant}}.{{.AggregateID}}`},
		{Name: "rest", Publisher: "amqp", Default: true, Topic: "misc.{{.AggregateType}}.{{.Key}}"},
	}, pubs)
	require.NoError(t, err)

	for _, tc := range []struct {
		name       string
		m          *outbox.Message
		pub, topic string
	}{
		{"FirstMatchWins", msg("ORDER_PAID", "order"), "kafka", "payments.order_paid"},
		{"GlobAndAggregate", msg("ORDER_SHIPPED", "order"), "nats", "orders.ORDER_SHIPPED"},
		{"BothMatchersMustMatch", msg("ORDER_SHIPPED", "invoice"), "amqp", "misc.invoice.a-1"},
		{"AggregateGlobKeepsDestination", msg("CUSTOMER_RENAMED", "customer_v2"), "amqp", "CUSTOMER_RENAMED"},
		{"AggregateGlobKeepsTopic", func() *outbox.Message {
			m := msg("CUSTOMER_RENAMED", "customer")
			m.Topic = "crm"
			return m
		}(), "amqp", "crm"},
		{"HeaderInTemplate", msg("TENANT_A", "tenant"), "nats", "acme.a-1"},
		{"QuestionMarkIsOneChar", msg("TENANT_AB", "tenant"), "amqp", "misc.tenant.a-1"},
		{"Default", msg("SOMETHING_ELSE", "thing"), "amqp", "misc.thing.a-1"},
		{"DefaultUsesKey", func() *outbox.Message {
			m := msg("SOMETHING_ELSE", "thing")
			m.PartitionKey = "pk"
			return m
		}(), "amqp", "misc.thing.pk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := *tc.m
			pub, topic, err := r.Match(tc.m)
			require.NoError(t, err)
			require.Equal(t, tc.pub, pub)
			require.Equal(t, tc.topic, topic)
			require.Equal(t, before, *tc.m, "Match must not change the message")
		})
	}

	t.Run("TemplateFailsOnMessage", func(t *testing.T) {
		m := msg("TENANT_B", "tenant")
		m.Headers = nil // .Headers.tenant: no such key
		_, _, err := r.Match(m)
		require.True(t, outbox.IsPermanent(err), "got %v", err)
		require.ErrorContains(t, err, "route 4 (tenant): topic template")
	})
}

func TestNoRouteIsPermanentWithReason(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r, err := router.New([]router.Route{{EventType: "ORDER_*", Publisher: "nats"}},
		map[string]outbox.Publisher{"nats": rec})
	require.NoError(t, err)

	msgs := []*outbox.Message{msg("ORDER_PAID", "order"), msg("USER_CREATED", "user"), msg("ORDER_SHIPPED", "order")}
	errs := r.Publish(t.Context(), msgs)
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	require.True(t, outbox.IsPermanent(errs[1]), "an unroutable message must be dead-lettered, got %v", errs[1])
	require.EqualError(t, errs[1], `router: no route for event type "USER_CREATED" (aggregate "user")`)
	var nr *router.NoRouteError
	require.ErrorAs(t, errs[1], &nr)
	require.Equal(t, router.NoRouteError{EventType: "USER_CREATED", AggregateType: "user"}, *nr)
	require.Equal(t, []string{msgs[0].MessageID, msgs[2].MessageID}, ids(rec.sent()), "the unroutable one is not sent")
}

// Two routes to one publisher, which reports every message unroutable: the
// strict route's messages become permanent, the other's stay retryable, and
// other errors are left as they are.
func TestUnroutablePermanentPerRoute(t *testing.T) {
	t.Parallel()
	other := errors.New("nacked")
	rabbit := &recorder{result: func(msgs []*outbox.Message) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			errs[i] = outbox.Unroutable(errors.New("amqppub: unroutable: 312 NO_ROUTE"))
			if m.AggregateID == "nack" {
				errs[i] = other
			}
		}
		return errs
	}}
	r, err := router.New([]router.Route{
		{Name: "strict", EventType: "PAYMENT_*", Publisher: "rabbit", UnroutablePermanent: true},
		{Name: "lenient", Publisher: "rabbit", Default: true},
	}, map[string]outbox.Publisher{"rabbit": rabbit})
	require.NoError(t, err)

	nack := msg("PAYMENT_NACKED", "payment")
	nack.AggregateID = "nack"
	errs := r.Publish(t.Context(), []*outbox.Message{msg("ORDER_PAID", "order"), msg("PAYMENT_TAKEN", "payment"), nack})
	require.Len(t, errs, 3)
	for _, tc := range []struct {
		name                  string
		err                   error
		unroutable, permanent bool
	}{
		{"LenientRouteRetries", errs[0], true, false},
		{"StrictRouteIsDead", errs[1], true, true},
		{"OtherErrorsUntouched", errs[2], false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.unroutable, outbox.IsUnroutable(tc.err), "%v", tc.err)
			require.Equal(t, tc.permanent, outbox.IsPermanent(tc.err), "%v", tc.err)
		})
	}
	require.EqualError(t, errs[1], "router: route 1 (strict): unroutable is permanent on this route: amqppub: unroutable: 312 NO_ROUTE")
	require.Same(t, other, errs[2])
}

func TestPublishGroupsAndMapsResultsBack(t *testing.T) {
	t.Parallel()
	boom := errors.New("kafka said no")
	kafka := &recorder{result: func(msgs []*outbox.Message) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.AggregateID == "fail" {
				errs[i] = boom
			}
		}
		return errs
	}}
	nats := &recorder{}
	r, err := router.New([]router.Route{
		{EventType: "ORDER_*", Publisher: "nats", Topic: "orders.{{.AggregateID}}"},
		{Publisher: "kafka", Default: true},
	}, map[string]outbox.Publisher{"nats": nats, "kafka": kafka})
	require.NoError(t, err)

	var msgs []*outbox.Message
	for i := range 10 {
		m := msg("ORDER_PAID", "order")
		if i%3 == 0 {
			m = msg("USER_SEEN", "user")
		}
		m.AggregateID = fmt.Sprint("agg-", i)
		if i == 6 {
			m.AggregateID = "fail"
		}
		msgs = append(msgs, m)
	}
	originals := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		originals[i] = *m
	}

	errs := r.Publish(t.Context(), msgs)
	require.Len(t, errs, len(msgs))
	for i, err := range errs {
		if i == 6 {
			require.ErrorIs(t, err, boom, "the kafka error lands on its own message")
			continue
		}
		require.NoError(t, err, "message %d", i)
	}

	// One call per publisher, each with its messages in batch order.
	require.Len(t, nats.batches, 1)
	require.Len(t, kafka.batches, 1)
	var wantNats, wantKafka []string
	for i, m := range msgs {
		if i%3 == 0 {
			wantKafka = append(wantKafka, m.MessageID)
		} else {
			wantNats = append(wantNats, m.MessageID)
		}
	}
	require.Equal(t, wantNats, ids(nats.sent()))
	require.Equal(t, wantKafka, ids(kafka.sent()))

	// The template set the topic on a copy; the caller's messages are unchanged.
	for _, m := range nats.sent() {
		require.Equal(t, "orders."+m.AggregateID, m.Topic)
	}
	for i, m := range msgs {
		require.Equal(t, originals[i], *m, "message %d was changed", i)
		require.Empty(t, m.Topic)
	}
	for _, m := range kafka.sent() {
		require.True(t, slices.Contains(msgs, m), "without a template the message itself is passed on")
	}
}

func TestPublishToSeveralPublishersConcurrently(t *testing.T) {
	t.Parallel()
	// Each publisher waits until the other has started: a sequential router
	// would deadlock here (and fail on the ctx deadline).
	startedA, startedB := make(chan struct{}), make(chan struct{})
	waitFor := func(mine, other chan struct{}) func([]*outbox.Message) []error {
		return func(msgs []*outbox.Message) []error {
			close(mine)
			select {
			case <-other:
				return make([]error, len(msgs))
			case <-time.After(10 * time.Second):
				return outbox.ErrorsFor(len(msgs), errors.New("the other publisher never started"))
			}
		}
	}
	a := &recorder{result: waitFor(startedA, startedB)}
	b := &recorder{result: waitFor(startedB, startedA)}
	r, err := router.New([]router.Route{
		{EventType: "A", Publisher: "a"},
		{EventType: "B", Publisher: "b"},
	}, map[string]outbox.Publisher{"a": a, "b": b})
	require.NoError(t, err)

	errs := r.Publish(t.Context(), []*outbox.Message{msg("A", "x"), msg("B", "x"), msg("A", "x")})
	require.Equal(t, []error{nil, nil, nil}, errs)
}

func TestPublisherWithWrongResultCount(t *testing.T) {
	t.Parallel()
	short := &recorder{result: func(msgs []*outbox.Message) []error { return nil }}
	good := &recorder{}
	r, err := router.New([]router.Route{
		{EventType: "SHORT", Publisher: "short"},
		{Publisher: "good", Default: true},
	}, map[string]outbox.Publisher{"short": short, "good": good})
	require.NoError(t, err)

	errs := r.Publish(t.Context(), []*outbox.Message{msg("SHORT", "x"), msg("OK", "x"), msg("SHORT", "x")})
	require.ErrorContains(t, errs[0], `publisher "short" returned 0 results for 2 messages`)
	require.NoError(t, errs[1])
	require.ErrorContains(t, errs[2], `publisher "short" returned 0 results for 2 messages`)
}

func TestPublishEdgeCases(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r, err := router.New([]router.Route{{Publisher: "p", Default: true, Topic: "{{.Headers.tenant}}"}},
		map[string]outbox.Publisher{"p": rec})
	require.NoError(t, err)

	require.Empty(t, r.Publish(t.Context(), nil))
	require.Empty(t, rec.batches, "an empty batch calls no publisher")

	noTenant := msg("E", "a")
	noTenant.Headers = nil
	errs := r.Publish(t.Context(), []*outbox.Message{nil, noTenant, msg("E", "a")})
	require.True(t, outbox.IsPermanent(errs[0]), "nil message: %v", errs[0])
	require.True(t, outbox.IsPermanent(errs[1]), "template failing on the message: %v", errs[1])
	require.NoError(t, errs[2])
	require.Equal(t, "acme", rec.sent()[0].Topic)
}

func TestTemplateFuncs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tmpl, want string
	}{
		{"{{lower .EventType}}", "order_paid"},
		{"{{upper .AggregateType}}", "ORDER"},
		{`{{replace "_" "." .EventType}}`, "ORDER.PAID"},
		{`{{trimPrefix "ORDER_" .EventType}}`, "PAID"},
		{`{{trimSuffix "_PAID" .EventType}}`, "ORDER"},
		{`{{.EventType | lower | replace "_" "-"}}`, "order-paid"},
		{`{{shout .EventType}}`, "ORDER_PAID!"},
	} {
		r, err := router.New([]router.Route{{Publisher: "p", Default: true, Topic: tc.tmpl}},
			map[string]outbox.Publisher{"p": &recorder{}},
			router.WithTemplateFuncs(template.FuncMap{"shout": func(s string) string { return s + "!" }}))
		require.NoError(t, err, tc.tmpl)
		_, topic, err := r.Match(msg("ORDER_PAID", "order"))
		require.NoError(t, err, tc.tmpl)
		require.Equal(t, tc.want, topic, tc.tmpl)
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	up, down := &recorder{}, &recorder{ping: errors.New("connection refused")}
	noPing := &plain{}
	routes := []router.Route{{Publisher: "up", Default: true}}

	r, err := router.New(routes, map[string]outbox.Publisher{"up": up, "noping": noPing})
	require.NoError(t, err)
	require.NoError(t, r.Ping(t.Context()))
	require.Equal(t, 1, up.pinged)

	r, err = router.New(routes, map[string]outbox.Publisher{"up": up, "down": down, "noping": noPing})
	require.NoError(t, err)
	err = r.Ping(t.Context())
	require.EqualError(t, err, `router: ping "down": connection refused`)
	require.Equal(t, 2, up.pinged, "every destination is pinged")
	require.Equal(t, 1, down.pinged)
}

func ids(msgs []*outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.MessageID
	}
	return out
}
