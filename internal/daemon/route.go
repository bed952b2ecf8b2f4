package daemon

import (
	"context"
	"fmt"
	"slices"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/publisher/cepub"
	"github.com/outboxkit/outbox/publisher/router"
)

// routerRoutes turns the config's routes and default route into the
// router's, each named by its config key so that errors point at it.
//
// A route whose messages go out as CloudEvents names the publisher
// outputName gives it, which publisher registers as a cepub wrapper.
func routerRoutes(cfg *config.Config) []router.Route {
	var routes []router.Route
	for i, r := range cfg.Routes {
		routes = append(routes, router.Route{Name: fmt.Sprintf("routes[%d]", i), EventType: r.EventType,
			AggregateType: r.AggregateType, Publisher: outputName(cfg, &r), Topic: r.Topic,
			UnroutablePermanent: r.UnroutableDead()})
	}
	if def := cfg.EffectiveDefaultRoute(); def != nil {
		routes = append(routes, router.Route{Name: "default_route", Publisher: outputName(cfg, def), Topic: def.Topic,
			Default: true, UnroutablePermanent: def.UnroutableDead()})
	}
	return routes
}

// output returns the format and mode of route r's messages, and its broker.
func output(cfg *config.Config, r *config.Route) (config.Output, *config.Broker) {
	brokers := cfg.EffectiveBrokers()
	for i := range brokers {
		if brokers[i].Name == r.Broker {
			return config.RouteOutput(r, &brokers[i]), &brokers[i]
		}
	}
	return config.Output{Format: config.FormatOutbox}, nil
}

// outputName is the name of the publisher route r's messages go to: its
// broker's, or for CloudEvents "<broker>+cloudevents-<mode>". Broker names
// hold no "+", so the two never clash.
func outputName(cfg *config.Config, r *config.Route) string {
	if o, _ := output(cfg, r); o.Format == config.FormatCloudEvents {
		return r.Broker + "+" + o.Format + "-" + o.Mode
	}
	return r.Broker
}

// rawBrokers names the brokers that send CloudEvents: a webhook or MQTT
// broker among them is opened to send payloads raw (config validation
// keeps each of those to one format).
func rawBrokers(cfg *config.Config) map[string]bool {
	raw := make(map[string]bool)
	routes := slices.Clone(cfg.Routes)
	if def := cfg.EffectiveDefaultRoute(); def != nil {
		routes = append(routes, *def)
	}
	for i := range routes {
		if o, _ := output(cfg, &routes[i]); o.Format == config.FormatCloudEvents {
			raw[routes[i].Broker] = true
		}
	}
	return raw
}

// cloudEvents wraps the brokers' publishers in cepub for every route that
// sends CloudEvents, adding each wrapper to pubs under its outputName.
func cloudEvents(cfg *config.Config, pubs map[string]outbox.Publisher) error {
	routes := slices.Clone(cfg.Routes)
	if def := cfg.EffectiveDefaultRoute(); def != nil {
		routes = append(routes, *def)
	}
	for i := range routes {
		o, b := output(cfg, &routes[i])
		name := outputName(cfg, &routes[i])
		if o.Format != config.FormatCloudEvents || pubs[name] != nil || pubs[b.Name] == nil {
			continue
		}
		mode := cepub.Binary
		if o.Mode == config.CloudEventsStructured {
			mode = cepub.Structured
		}
		p, err := cepub.New(pubs[b.Name], config.CloudEventsBinding(b.URL.Scheme()), cfg.EffectiveCloudEventsSource(),
			cepub.WithMode(mode))
		if err != nil {
			return fmt.Errorf("broker %s: %w", b.Name, err)
		}
		pubs[name] = p
	}
	return nil
}

// direct reports whether the relays can publish to the one broker itself:
// one broker, no routes, and a default route without a topic template that
// leaves unroutable messages to be retried.
func direct(cfg *config.Config) bool {
	def := cfg.EffectiveDefaultRoute()
	return len(cfg.EffectiveBrokers()) == 1 && len(cfg.Routes) == 0 && def != nil && def.Topic == "" &&
		!def.UnroutableDead()
}

// checkRoutes builds the router over stand-in publishers, which checks every
// route's patterns and topic template (running it on a sample message)
// without connecting to anything.
func checkRoutes(cfg *config.Config) error {
	if direct(cfg) {
		return nil
	}
	pubs := make(map[string]outbox.Publisher)
	for _, b := range cfg.EffectiveBrokers() {
		pubs[b.Name] = standIn{}
	}
	if err := cloudEvents(cfg, pubs); err != nil {
		return err
	}
	_, err := router.New(routerRoutes(cfg), pubs)
	return err
}

// standIn is a publisher that is never called: it lets New check the routes.
type standIn struct{}

func (standIn) Publish(context.Context, []*outbox.Message) []error {
	panic("daemon: the stand-in publisher of the route check was called")
}

// publisher returns what the relays publish to: the one broker itself when
// direct, else a router over the brokers by the config's routes.
func (d *Daemon) publisher(brokers []openBroker) (outbox.Publisher, error) {
	pubs := make(map[string]outbox.Publisher, len(brokers))
	for _, b := range brokers {
		pubs[b.name] = b.pub
	}
	if err := cloudEvents(d.cfg, pubs); err != nil {
		return nil, err
	}
	if direct(d.cfg) {
		return pubs[outputName(d.cfg, d.cfg.EffectiveDefaultRoute())], nil
	}
	return router.New(routerRoutes(d.cfg), pubs)
}
