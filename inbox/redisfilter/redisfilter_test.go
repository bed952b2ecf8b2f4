package redisfilter_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/inbox/redisfilter"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	cases := []struct {
		name string
		opts []redisfilter.Option
		want string // substring of the error; "" = valid
	}{
		{"Defaults", nil, ""},
		{"ZeroDoneTTL", []redisfilter.Option{redisfilter.WithTTL(0, time.Second)}, "WithTTL"},
		{"NegativeClaimTTL", []redisfilter.Option{redisfilter.WithTTL(time.Hour, -time.Second)}, "WithTTL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := redisfilter.New(rdb, tc.opts...)
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "inbox:c:m", f.Key("c", "m"))
		})
	}
}
