package config

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "1m30s", want: 90 * time.Second},
		{in: "0", want: 0},
		{in: "-5s", want: -5 * time.Second},
		{in: "7d", want: 7 * day},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "2d30m", want: 2*day + 30*time.Minute},
		{in: "1d1.5h", want: day + 90*time.Minute},
		{in: "0d", want: 0},
		{in: " 3d ", want: 3 * day},
		{in: "-1d", want: -day},
		{in: "+1d2h", want: 26 * time.Hour},
		{in: "007d", want: 7 * day},
		{in: "106751d", want: 106751 * day},
		{in: "d", err: true},
		{in: "7", err: true},
		{in: "7days", err: true},
		{in: "1.5d", err: true},
		{in: "1d-1h", err: true},
		{in: "1d+1h", err: true},
		{in: "1d0", err: true},
		{in: "1dd", err: true},
		{in: "1h1d", err: true},
		{in: "--1d", err: true},
		{in: "106752d", err: true},
		{in: "106751d24h", err: true},
		{in: "99999999999999999999d", err: true},
		{in: "", err: true},
	} {
		got, err := ParseDuration(tc.in)
		if tc.err {
			require.EqualError(t, err, `"`+tc.in+`" is not a duration (like 500ms, 2s, 1m30s)`, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{7 * day, "7d"},
		{day, "1d"},
		{36 * time.Hour, "36h0m0s"},
		{time.Second, "1s"},
		{0, "0s"},
		{-day, "-24h0m0s"},
		{time.Duration(math.MaxInt64), "2562047h47m16.854775807s"},
	} {
		got := FormatDuration(tc.in)
		require.Equal(t, tc.want, got)
		back, err := ParseDuration(got)
		require.NoError(t, err, "%s parses back", got)
		require.Equal(t, tc.in, back)
	}
}

// durationKeys returns the YAML keys of every duration setting.
func durationKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	for _, f := range fields {
		if _, ok := f.ptr(Default()).(*time.Duration); ok {
			keys = append(keys, f.Key)
		}
	}
	require.Contains(t, keys, "archive_older_than")
	require.Contains(t, keys, "poll_interval")
	return keys
}

// Every duration setting takes days the same way from each of the three
// places a setting comes from: the file, an OUTBOX_* variable and a flag
// (the command line passes flags to Set).
func TestDurationSettingsTakeDays(t *testing.T) {
	t.Parallel()
	for _, key := range durationKeys(t) {
		get := func(c *Config) time.Duration {
			for _, f := range fields {
				if f.Key == key {
					return *f.ptr(c).(*time.Duration)
				}
			}
			t.Fatalf("no setting %s", key)
			return 0
		}
		for _, tc := range []struct {
			place string
			load  func() (*Config, error)
		}{
			{"File", func() (*Config, error) { return load("", []byte(key+": 1d12h\n"), noEnv) }},
			{"QuotedInFile", func() (*Config, error) { return load("", []byte(key+": \"1d12h\"\n"), noEnv) }},
			{"Env", func() (*Config, error) {
				return load("", nil, env(map[string]string{EnvPrefix + strings.ToUpper(key): "1d12h"}))
			}},
			{"Flag", func() (*Config, error) { c := Default(); return c, c.Set(key, "1d12h") }},
		} {
			c, err := tc.load()
			require.NoError(t, err, "%s from %s", key, tc.place)
			require.Equal(t, 36*time.Hour, get(c), "%s from %s", key, tc.place)
		}
	}
}

// A duration written with days is rewritten in place for the decoder: only
// durations (never a string that looks like one), wherever YAML puts them,
// and the decoder's errors still name the right lines.
func TestParseDays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		yaml  string
		check func(t *testing.T, c *Config)
		err   string
	}{
		{name: "Plain", yaml: "archive_older_than: 30d # a month\nbatch_size: 7\n", check: func(t *testing.T, c *Config) {
			require.Equal(t, 30*day, c.ArchiveOlderThan)
			require.Equal(t, 7, c.BatchSize)
		}},
		{name: "SingleQuoted", yaml: "archive_older_than: '2d'\n", check: func(t *testing.T, c *Config) {
			require.Equal(t, 2*day, c.ArchiveOlderThan)
		}},
		{name: "GoFormUntouched", yaml: "archive_older_than: 36h\n", check: func(t *testing.T, c *Config) {
			require.Equal(t, 36*time.Hour, c.ArchiveOlderThan)
		}},
		{name: "StringsUntouched", yaml: "name: 7d\ntable: 1d12h\narchive_every: 1d\n", check: func(t *testing.T, c *Config) {
			require.Equal(t, "7d", c.Name)
			require.Equal(t, "1d12h", c.Table)
			require.Equal(t, day, c.ArchiveEvery)
		}},
		{name: "FlowMapTwoOnALine", yaml: "{name: \"ünï\", archive_every: 1d, archive_older_than: 2d1h}\n", check: func(t *testing.T, c *Config) {
			require.Equal(t, "ünï", c.Name)
			require.Equal(t, day, c.ArchiveEvery)
			require.Equal(t, 2*day+time.Hour, c.ArchiveOlderThan)
		}},
		{name: "Brokers", yaml: "brokers:\n  - {name: a, url: 'redis://h', dedup_ttl: 1d}\n  - name: b\n    url: nats://h\n    duplicate_window: \"2d\"\n",
			check: func(t *testing.T, c *Config) {
				require.Len(t, c.Brokers, 2)
				require.Equal(t, day, c.Brokers[0].DedupTTL)
				require.Equal(t, 2*day, c.Brokers[1].DuplicateWindow)
			}},
		{name: "CRLF", yaml: "name: x\r\narchive_older_than: 3d\r\nbatch_size: 9\r\n", check: func(t *testing.T, c *Config) {
			require.Equal(t, 3*day, c.ArchiveOlderThan)
			require.Equal(t, 9, c.BatchSize)
		}},
		{name: "CROnly", yaml: "name: x\rarchive_older_than: 3d\rbatch_size: 9\r", check: func(t *testing.T, c *Config) {
			require.Equal(t, 3*day, c.ArchiveOlderThan)
			require.Equal(t, 9, c.BatchSize)
		}},
		{name: "LaterErrorKeepsItsLine", yaml: "archive_older_than: 7d\narchive_every: 1d\nbatch_size: lots\n",
			err: `line 3: batch_size: "lots" is not a whole number`},
		{name: "UnknownKeyKeepsItsLine", yaml: "archive_older_than: 7d\nbatch_sise: 1d\n",
			err: `line 2: unknown key "batch_sise"`},
		{name: "BadDays", yaml: "name: x\narchive_older_than: 7dd\n",
			err: `line 2: archive_older_than: "7dd" is not a duration with a unit (500ms, 5s, 1m30s)`},
		// Behind an anchor the value is not where the parser's column points;
		// the rewrite leaves it alone rather than guess, and the decoder refuses it.
		{name: "AnchoredLeftAlone", yaml: "archive_older_than: &keep 7d\n",
			err: `line 1: archive_older_than: "7d" is not a duration with a unit (500ms, 5s, 1m30s)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tc.yaml))
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}
