package redispub

import "github.com/redis/go-redis/v9"

// Classify exposes classify to the tests.
var Classify = classify

// WithFreshScript gives the Publisher a dedup script that the server has
// never seen (a salt comment changes its SHA), so its first use meets
// NOSCRIPT.
func WithFreshScript(salt string) Option {
	return func(c *config) { c.script = redis.NewScript("-- " + salt + "\n" + dedupSource) }
}
