package daemon

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/publisher/router"
)

// routerRoutes turns the config's routes and default route into the
// router's, each named by its config key so that errors point at it.
func routerRoutes(cfg *config.Config) []router.Route {
	var routes []router.Route
	for i, r := range cfg.Routes {
		routes = append(routes, router.Route{Name: fmt.Sprintf("routes[%d]", i), EventType: r.EventType,
			AggregateType: r.AggregateType, Publisher: r.Broker, Topic: r.Topic,
			UnroutablePermanent: r.UnroutableDead()})
	}
	if def := cfg.EffectiveDefaultRoute(); def != nil {
		routes = append(routes, router.Route{Name: "default_route", Publisher: def.Broker, Topic: def.Topic, Default: true,
			UnroutablePermanent: def.UnroutableDead()})
	}
	return routes
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
	if direct(d.cfg) {
		return brokers[0].pub, nil
	}
	pubs := make(map[string]outbox.Publisher, len(brokers))
	for _, b := range brokers {
		pubs[b.name] = b.pub
	}
	return router.New(routerRoutes(d.cfg), pubs)
}
