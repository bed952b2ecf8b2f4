package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRelayOptionsValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts []RelayOption
		want []string // substrings of the error; nil = valid
	}{
		{"Defaults", nil, nil},
		{"BatchZero", []RelayOption{WithBatchSize(0)}, []string{"WithBatchSize"}},
		{"NoAttempts", []RelayOption{WithMaxAttempts(0)}, []string{"WithMaxAttempts"}},
		{"BackoffCapBelowBase", []RelayOption{WithBackoff(time.Minute, time.Second)}, []string{"WithBackoff"}},
		{"LeaseTooShort", []RelayOption{WithLease(time.Second)}, []string{"WithLease"}},
		{"Several", []RelayOption{WithBatchSize(-1), WithPollInterval(0), WithLogger(nil)},
			[]string{"WithBatchSize", "WithPollInterval", "WithLogger"}},
		{"HookOfOneKind", []RelayOption{WithHooks(batchHook{})}, nil},
		{"HookOfNoKind", []RelayOption{WithHooks(batchHook{}, func(BatchEvent) {})},
			[]string{"WithHooks: hook 1 (func(outbox.BatchEvent))"}},
		{"NilHook", []RelayOption{WithHooks(nil)}, []string{"WithHooks: hook 0 (<nil>)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := defaultRelayConfig()
			for _, o := range tc.opts {
				o(&cfg)
			}
			err := cfg.validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// batchHook implements HookBatch only.
type batchHook struct{}

func (batchHook) OnBatch(BatchEvent) {}

func TestBackoff(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: defaultRelayConfig()}
	r.cfg.backoffBase, r.cfg.backoffCap = 100*time.Millisecond, 2*time.Second
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{5, 1600 * time.Millisecond}, {6, 2 * time.Second}, {60, 2 * time.Second}} {
		for range 50 {
			d := r.backoff(tc.attempt)
			require.GreaterOrEqual(t, d, tc.want*8/10, "attempt %d", tc.attempt)
			require.LessOrEqual(t, d, tc.want*12/10, "attempt %d", tc.attempt)
		}
	}
}
