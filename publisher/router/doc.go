// Package router sends each outbox message to one of several publishers,
// chosen by its event type or aggregate type, under a topic made from a
// template. A [Router] is itself an [outbox.Publisher], so one relay can feed
// several brokers at once.
//
// # Routes
//
// A [Route] matches Message.EventType and/or Message.AggregateType, exactly
// or with a glob pattern ("ORDER_*", "order?"; path.Match syntax), names the
// publisher that gets the message, and may set the message's topic with a
// text/template ("orders.{{.EventType}}", "{{lower .AggregateType}}.events").
// Routes are tried in order and the first match wins; the [Route.Default]
// route takes every message no other route matched.
//
//	r, err := router.New([]router.Route{
//		{EventType: "ORDER_*", Publisher: "nats", Topic: "orders.{{.EventType}}"},
//		{AggregateType: "customer", Publisher: "kafka"},
//		{Publisher: "kafka", Default: true, Topic: "misc.{{.AggregateType}}"},
//	}, map[string]outbox.Publisher{"nats": natsPub, "kafka": kafkaPub})
//
// [New] checks everything at construction (unknown publisher names, bad
// patterns, templates that do not parse or name a missing field, duplicate
// defaults) and reports every problem in one error.
//
// # Unroutable messages
//
// A message that matches no route, when there is no default route, is never
// dropped: its result is a [*NoRouteError] marked [outbox.Permanent], so the
// relay marks it dead at once with the reason
// `router: no route for event type "X" (aggregate "Y")`, visible to
// `outbox dead list` and the dead-message alert. A template that fails on a
// message (a header it lacks) fails that message the same way.
//
// # Publishing
//
// [Router.Publish] groups a batch by publisher, keeping batch order within
// each group (so an aggregate's order holds), publishes the groups
// concurrently, and returns the results in the caller's order. A templated
// topic is set on a copy of the message; the caller's message is unchanged.
// [Router.Ping] pings every publisher that can be pinged.
package router
