package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/outboxkit/outbox"
)

// Route sends the messages it matches to one named publisher, optionally
// under a topic made from a template. Its fields are plain so that a config
// file can fill them.
type Route struct {
	// Name names the route in errors. Optional.
	Name string
	// EventType matches Message.EventType: an exact name or a glob pattern
	// (path.Match syntax: *, ?, [a-z]), e.g. "ORDER_*". Empty matches any.
	EventType string
	// AggregateType matches Message.AggregateType, like EventType, e.g.
	// "order*". Empty matches any. A route that sets both matches a message
	// only when both match.
	AggregateType string
	// Publisher names the destination: a key of the publishers map given to
	// [New]. Required.
	Publisher string
	// Topic is a text/template executed over the *outbox.Message to set its
	// topic (subject, Kafka topic, routing key) for this publish, e.g.
	// "orders.{{.EventType}}" or "{{lower .AggregateType}}.{{.EventType}}".
	// It sees the message's fields (.EventType, .AggregateType,
	// .AggregateID, .MessageID, .Topic, .PartitionKey, .Headers) and methods
	// (.Key, .Destination), and the functions lower, upper, replace
	// (old new s), trimPrefix and trimSuffix (prefix s). Empty keeps the
	// message's own destination (its Topic, else its EventType).
	Topic string
	// Default makes this the route of every message that no other route
	// matches. At most one route is the default, and it has no EventType
	// or AggregateType.
	Default bool
	// UnroutablePermanent makes a message of this route that its publisher
	// reports as unroutable ([outbox.IsUnroutable]: no queue bound to its
	// routing key, no stream for its subject, an unknown topic) fail with
	// [outbox.Permanent], so the relay marks it dead at its first attempt.
	// Default: false, so such a message is retried with backoff up to the
	// relay's attempt limit, and a destination created in the meantime (its
	// consumer was being deployed) receives it.
	UnroutablePermanent bool
}

// label names route i in errors.
func (r Route) label(i int) string {
	if r.Name != "" {
		return fmt.Sprintf("route %d (%s)", i+1, r.Name)
	}
	return fmt.Sprintf("route %d", i+1)
}

// NoRouteError is the error (marked [outbox.Permanent]) of a message that
// matches no route while the router has no default route: the relay marks
// it dead with this reason instead of dropping it.
type NoRouteError struct {
	EventType     string
	AggregateType string
}

func (e *NoRouteError) Error() string {
	return fmt.Sprintf("router: no route for event type %q (aggregate %q)", e.EventType, e.AggregateType)
}

// Router is an [outbox.Publisher] that sends each message of a batch to the
// publisher its route names. It is safe for concurrent use, and never closes
// the publishers it routes to.
type Router struct {
	routes []compiled // in the caller's order, the default route excluded
	def    *compiled  // the default route, or nil
	pubs   map[string]outbox.Publisher
}

var (
	_ outbox.Publisher = (*Router)(nil)
	_ outbox.Pinger    = (*Router)(nil)
)

type compiled struct {
	label          string
	eventType      string
	aggType        string
	pub            string
	topic          *template.Template // nil keeps the message's destination
	unroutableDead bool
}

type config struct {
	funcs template.FuncMap
}

// Option configures a [Router].
type Option func(*config)

// WithTemplateFuncs adds functions to those the topic templates can call
// (lower, upper, replace, trimPrefix, trimSuffix), replacing any of the same
// name. Default: none added.
func WithTemplateFuncs(funcs template.FuncMap) Option {
	return func(c *config) {
		for k, v := range funcs {
			c.funcs[k] = v
		}
	}
}

func defaultFuncs() template.FuncMap {
	return template.FuncMap{
		"lower":      strings.ToLower,
		"upper":      strings.ToUpper,
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"trimPrefix": func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
	}
}

// sample is the message every topic template is tried on at construction,
// so that a template naming a field or method that does not exist, or
// calling a function wrongly, fails there rather than on every message.
var sample = &outbox.Message{
	MessageID: "00000000-0000-7000-8000-000000000000", AggregateType: "aggregate", AggregateID: "id",
	EventType: "EVENT", Payload: []byte(`{}`), Headers: map[string]string{},
}

// New returns a Router over routes and the named publishers. It checks
// everything once, here: every route names a publisher of the map (none
// nil), sets a valid pattern, a template that parses and runs, at least
// one matcher unless it is the default, and at most one route is the
// default. It returns one error listing every problem. Messages are matched
// against the routes in order; the first match wins, and the default route
// takes what none matched.
func New(routes []Route, publishers map[string]outbox.Publisher, opts ...Option) (*Router, error) {
	cfg := config{funcs: defaultFuncs()}
	for _, opt := range opts {
		opt(&cfg)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	names := slices.Sorted(maps.Keys(publishers))
	for _, name := range names {
		if publishers[name] == nil {
			bad("publisher %q is nil", name)
		}
	}
	if len(routes) == 0 {
		bad("no routes")
	}
	r := &Router{pubs: maps.Clone(publishers)}
	for i, rt := range routes {
		label := rt.label(i)
		c := compiled{label: label, eventType: rt.EventType, aggType: rt.AggregateType, pub: rt.Publisher,
			unroutableDead: rt.UnroutablePermanent}
		switch _, ok := publishers[rt.Publisher]; {
		case rt.Publisher == "":
			bad("%s: publisher is empty", label)
		case !ok:
			bad("%s: unknown publisher %q (have %s)", label, rt.Publisher, quoteList(names))
		}
		for _, p := range []struct{ field, pattern string }{{"EventType", rt.EventType}, {"AggregateType", rt.AggregateType}} {
			if _, err := path.Match(p.pattern, ""); err != nil {
				bad("%s: %s pattern %q: %w", label, p.field, p.pattern, err)
			}
		}
		if rt.Topic != "" {
			t, err := template.New(label).Funcs(cfg.funcs).Option("missingkey=error").Parse(rt.Topic)
			if err == nil {
				err = tryOn(t, sample)
			}
			if err != nil {
				bad("%s: topic template %q: %w", label, rt.Topic, err)
			}
			c.topic = t
		}
		switch {
		case rt.Default && (rt.EventType != "" || rt.AggregateType != ""):
			bad("%s: a default route takes no EventType or AggregateType", label)
		case rt.Default && r.def != nil:
			bad("%s: a second default route (%s is one already)", label, r.def.label)
		case rt.Default:
			r.def = &c
		case rt.EventType == "" && rt.AggregateType == "":
			bad("%s: matches nothing: set EventType, AggregateType or Default", label)
		default:
			r.routes = append(r.routes, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("router: new: %w", err)
	}
	return r, nil
}

func quoteList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// tryOn runs t over m, tolerating what depends on the message's data (a
// header it lacks, an empty result), so that only mistakes in the template
// itself are reported.
func tryOn(t *template.Template, m *outbox.Message) error {
	c, err := t.Clone()
	if err != nil {
		return err
	}
	return c.Option("missingkey=zero").Execute(io.Discard, m)
}

// execute runs a topic template over m.
func execute(t *template.Template, m *outbox.Message) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, m); err != nil {
		return "", err
	}
	topic := b.String()
	switch {
	case topic == "":
		return "", errors.New("produced an empty topic")
	case len(topic) > outbox.MaxTopicLength:
		return "", fmt.Errorf("produced a topic of %d bytes, longer than %d", len(topic), outbox.MaxTopicLength)
	}
	return topic, nil
}

// Match returns the name of the publisher m goes to and the topic it is
// published under, or the reason it cannot be routed (marked
// [outbox.Permanent]: a [*NoRouteError], or a topic template that failed on
// m). It does not change m.
func (r *Router) Match(m *outbox.Message) (publisher, topic string, err error) {
	c, topic, err := r.route(m)
	if err != nil {
		return "", "", err
	}
	return c.pub, topic, nil
}

// route returns the route of m and its topic, or the reason m cannot be
// routed, as Match does.
func (r *Router) route(m *outbox.Message) (*compiled, string, error) {
	c := r.match(m)
	if c == nil {
		return nil, "", outbox.Permanent(&NoRouteError{EventType: m.EventType, AggregateType: m.AggregateType})
	}
	if c.topic == nil {
		return c, m.Destination(), nil
	}
	topic, err := execute(c.topic, m)
	if err != nil {
		return nil, "", outbox.Permanent(fmt.Errorf("router: %s: topic template: %w", c.label, err))
	}
	return c, topic, nil
}

// match returns the route of m: the first that matches, else the default, else nil.
func (r *Router) match(m *outbox.Message) *compiled {
	for i := range r.routes {
		c := &r.routes[i]
		if glob(c.eventType, m.EventType) && glob(c.aggType, m.AggregateType) {
			return c
		}
	}
	return r.def
}

// glob reports whether s matches pattern; an empty pattern matches anything.
// Patterns were checked in New, so Match cannot fail here.
func glob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, _ := path.Match(pattern, s)
	return ok
}

// group is the part of a batch that goes to one publisher.
type group struct {
	pub    outbox.Publisher
	name   string
	msgs   []*outbox.Message
	idx    []int       // positions in the caller's batch
	routes []*compiled // the route of each message
}

// Publish routes every message, publishes each publisher's share of the
// batch (concurrently when there are several), and returns one result per
// message in the caller's order. Within one publisher the messages keep
// their order in the batch, so an aggregate's order holds.
//
// A message published under a topic template is a shallow copy of the
// caller's with Topic set; the caller's message is not changed. A message
// that matches no route, or whose template fails, gets an error marked
// [outbox.Permanent] without being sent, so the relay marks it dead with
// that reason; it is never dropped. A message its publisher reports as
// unroutable gets that error as is (retried), or marked [outbox.Permanent]
// when its route sets [Route.UnroutablePermanent].
func (r *Router) Publish(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	groups := make(map[string]*group)
	var order []*group // first-seen order, for a stable fan-out
	for i, m := range msgs {
		if m == nil {
			errs[i] = outbox.Permanent(errors.New("router: nil message"))
			continue
		}
		c, topic, err := r.route(m)
		if err != nil {
			errs[i] = err
			continue
		}
		name := c.pub
		send := m
		if topic != m.Destination() {
			c := *m
			c.Topic = topic
			send = &c
		}
		g := groups[name]
		if g == nil {
			g = &group{pub: r.pubs[name], name: name}
			groups[name] = g
			order = append(order, g)
		}
		g.msgs = append(g.msgs, send)
		g.idx = append(g.idx, i)
		g.routes = append(g.routes, c)
	}

	publish := func(g *group) {
		res := g.pub.Publish(ctx, g.msgs)
		if len(res) != len(g.msgs) {
			res = outbox.ErrorsFor(len(g.msgs),
				fmt.Errorf("router: publisher %q returned %d results for %d messages", g.name, len(res), len(g.msgs)))
		}
		for j, err := range res {
			if c := g.routes[j]; c.unroutableDead && outbox.IsUnroutable(err) && !outbox.IsPermanent(err) {
				err = outbox.Permanent(fmt.Errorf("router: %s: unroutable is permanent on this route: %w", c.label, err))
			}
			errs[g.idx[j]] = err // each group writes its own positions
		}
	}
	if len(order) == 1 {
		publish(order[0])
		return errs
	}
	var wg sync.WaitGroup
	for _, g := range order {
		wg.Go(func() { publish(g) })
	}
	wg.Wait()
	return errs
}

// Ping pings, concurrently, every publisher that implements [outbox.Pinger]
// (publishers that do not are taken as reachable) and returns nil when all
// answer, else an error naming each that did not.
func (r *Router) Ping(ctx context.Context) error {
	names := slices.Sorted(maps.Keys(r.pubs))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		p, ok := r.pubs[name].(outbox.Pinger)
		if !ok {
			continue
		}
		wg.Go(func() {
			if err := p.Ping(ctx); err != nil {
				errs[i] = fmt.Errorf("router: ping %q: %w", name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
