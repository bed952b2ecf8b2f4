package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestArchiveSettings(t *testing.T) {
	t.Parallel()
	valid := func() *Config {
		c := Default()
		c.DB = NewSecret("postgres://u:pw@localhost/db")
		c.Broker = NewSecret("nats://127.0.0.1:4222")
		return c
	}
	for _, tc := range []struct {
		name      string
		change    func(c *Config)
		want      string // a validation error, "" = valid
		scheduled bool   // ArchiveScheduled when valid
	}{
		{"DefaultOn", func(c *Config) {}, "", true},
		{"Off", func(c *Config) { c.ArchiveEvery = 0 }, "", false},
		{"OffWithDeleteSent", func(c *Config) { c.DeleteSent = true }, "", false},
		{"DeleteMode", func(c *Config) { c.ArchiveDelete = true; c.ArchiveOlderThan = 0 }, "", true},
		{"ShortPeriod", func(c *Config) { c.ArchiveEvery = 100 * time.Millisecond }, "", true},
		{"LargestBatch", func(c *Config) { c.ArchiveBatch = MaxArchiveBatch }, "", true},
		{"NegativeEvery", func(c *Config) { c.ArchiveEvery = -time.Second },
			"archive_every: -1s is negative (0 turns the scheduled archive off)", false},
		{"NegativeAge", func(c *Config) { c.ArchiveOlderThan = -time.Hour },
			"archive_older_than: -1h0m0s is negative (0s archives every sent row)", false},
		{"ZeroBatch", func(c *Config) { c.ArchiveBatch = 0 }, "archive_batch: 0 is not between 1 and 10000", false},
		{"BatchTooBig", func(c *Config) { c.ArchiveBatch = MaxArchiveBatch + 1 },
			"archive_batch: 10001 is not between 1 and 10000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tc.change(c)
			err := c.Validate()
			if tc.want != "" {
				require.EqualError(t, err, tc.want, "one problem, named by its key")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.scheduled, c.ArchiveScheduled())
		})
	}
}

func TestArchiveSettingsFromEveryPlace(t *testing.T) {
	t.Parallel()
	c := Default()
	require.Equal(t, DefaultArchiveEvery, c.ArchiveEvery)
	require.Equal(t, 7*24*time.Hour, c.ArchiveOlderThan, "sent rows are kept 7 days")
	require.Equal(t, DefaultArchiveBatch, c.ArchiveBatch)
	require.False(t, c.ArchiveDelete)

	c, err := load("", []byte("archive_every: 30m\narchive_older_than: 48h\narchive_batch: 200\n"), env(map[string]string{
		"OUTBOX_ARCHIVE_BATCH":  "50", // the environment beats the file
		"OUTBOX_ARCHIVE_DELETE": "true",
	}))
	require.NoError(t, err)
	require.Equal(t, 30*time.Minute, c.ArchiveEvery)
	require.Equal(t, 48*time.Hour, c.ArchiveOlderThan)
	require.Equal(t, 50, c.ArchiveBatch)
	require.True(t, c.ArchiveDelete)

	require.NoError(t, c.Set("archive_every", "0"))
	require.Zero(t, c.ArchiveEvery)
	require.NoError(t, c.Set("archive_older_than", "7d"), "days, as outbox archive --older-than takes them")
	require.Equal(t, 7*24*time.Hour, c.ArchiveOlderThan)

	_, err = Parse([]byte("archive_every: 1\n"))
	require.EqualError(t, err, `line 1: archive_every: "1" is not a duration with a unit (500ms, 5s, 1m30s)`)
}
