package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzLoad feeds arbitrary bytes to the config loader. Whatever the input,
// loading returns a config or an error (one line), never panics, and gives
// the same answer twice; a loaded config validates without panicking and
// its validation errors never show the database password. The testdata files
// are the seed corpus, so `go test` runs them as a normal test.
func FuzzLoad(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	require.NoError(f, err)
	for _, name := range files {
		data, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(data)
	}
	for _, s := range []string{
		"", "~", "[]", "{}", "db: [", "db: &a x\nbroker: *a\n", "brokers:\n  - {name: a, url: 'nats://h', prefix: ''}\n",
		"batch_size: 99999999999999999999\n", "poll_interval: -5s\n", "db: !!binary aGk=\n", "\t\n", "%YAML 1.1\n---\n",
		"db: sqlite://\nroutes: [{broker: x, topic: '{{'}]\n", "default_route: {broker: default}\nbroker: redis://h\n",
		"x: 1\nx: 2\n", "a: &a {b: 1}\nc: {<<: *a, b: 2}\n",
		"archive_older_than: 7d\r\nbrokers: [{name: a, url: 'redis://h', dedup_ttl: \"1d12h\"}]\n", "{name: \"é\", archive_every: 2d}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := load("", data, noEnv)
		c2, err2 := load("", data, noEnv)
		if err != nil {
			require.Nil(t, c)
			require.EqualError(t, err2, err.Error(), "deterministic")
			require.NotContains(t, err.Error(), "\n", "one line")
			return
		}
		require.NoError(t, err2)
		require.Equal(t, c, c2, "deterministic")
		verr := c.Validate()
		_ = c.ValidateDB()
		_ = c.PoolSize()
		_ = c.EffectiveDefaultRoute()
		for _, b := range c.EffectiveBrokers() {
			_ = b.EffectiveSubjects()
		}
		if verr == nil {
			return
		}
		// The password of a URL never appears in a validation error, unless it
		// also appears elsewhere in the config text (then it is not the secret that leaked).
		if _, pw, ok := strings.Cut(userinfo(c.DB.Value()), ":"); ok && len(pw) >= 4 {
			if strings.Count(string(data), pw) == 1 {
				require.NotContains(t, verr.Error(), pw)
			}
		}
	})
}

// userinfo returns the user:password part of a URL, or "".
func userinfo(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	if slash := strings.IndexAny(rest, "/?#"); slash >= 0 && slash < at {
		return ""
	}
	return rest[:at]
}
