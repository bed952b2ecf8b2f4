package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox"
)

// memberStore is a headStore that is also an outbox.Membership answering
// a fixed view (or err), and records each claim's slot preference and
// each heartbeat.
type memberStore struct {
	*headStore
	slot, count int
	err         error

	mu     sync.Mutex
	prefs  [][2]int // each claim's Slot and Slots
	beats  []time.Duration
	leaves int
}

func (s *memberStore) Claim(ctx context.Context, p outbox.ClaimParams) (*outbox.Claim, error) {
	s.mu.Lock()
	s.prefs = append(s.prefs, [2]int{p.Slot, p.Slots})
	s.mu.Unlock()
	return s.headStore.Claim(ctx, p)
}

func (s *memberStore) Heartbeat(_ context.Context, _ string, _ time.Duration) (int, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beats = append(s.beats, time.Since(s.start))
	return s.slot, s.count, s.err
}

func (s *memberStore) Leave(context.Context, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaves++
	return nil
}

// TestRelaySlots checks, in fake time, how a relay uses a store's
// membership: it heartbeats at start and then every third of its TTL (with
// jitter), leaves when it stops, and asks for its slot only while it
// drains a backlog (since a claim came back at least half full) and
// another relay is live, until two claims in a row find nothing; a table of relays that cannot be made costs one
// warning and no preference; an unordered relay does not heartbeat.
func TestRelaySlots(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		ordered     bool
		slot, count int
		err         error
		aggs        int // aggregates of 3 rows each, batches of 10
		wantBeats   [2]int
		wantLeaves  int
		wantPrefs   func(t *testing.T, prefs, claims [][2]int)
		wantWarning int
	}{
		{
			name: "PrefersItsSlotWhileDraining", ordered: true, slot: 1, count: 3, aggs: 40,
			wantBeats: [2]int{11, 15}, wantLeaves: 1,
			wantPrefs: func(t *testing.T, prefs, claims [][2]int) {
				// Draining starts with a claim at least half full, goes on
				// through short claims, and ends with two empty ones.
				preferred, draining, dry := 0, false, 0
				for i, p := range prefs {
					if draining {
						require.Equal(t, [2]int{1, 3}, p, "claim %d, draining", i)
						preferred++
					} else {
						require.Equal(t, [2]int{0, 0}, p, "claim %d, not draining", i)
					}
					switch n := claims[i][0]; {
					case n == 0:
						if dry++; dry >= 2 {
							draining = false
						}
					case 2*n >= 10:
						draining, dry = true, 0
					default:
						dry = 0
					}
				}
				require.Positive(t, preferred, "no claim preferred the relay's slot")
				require.False(t, draining, "the relay still drains when idle")
			},
		},
		{
			name: "AloneNoPreference", ordered: true, slot: 0, count: 1, aggs: 40, wantBeats: [2]int{11, 15}, wantLeaves: 1,
			wantPrefs: noPreference,
		},
		{
			name: "NoTableOneWarning", ordered: true, err: fmt.Errorf("%w: run outbox migrate", outbox.ErrNoMembership), aggs: 40,
			wantBeats: [2]int{1, 1}, wantPrefs: noPreference, wantWarning: 1,
		},
		{
			name: "UnorderedNoMembership", ordered: false, slot: 1, count: 3, aggs: 40, wantPrefs: noPreference,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				st := &memberStore{headStore: newHeadStore(), slot: tc.slot, count: tc.count, err: tc.err}
				st.runs = true
				var aggs []string
				for a := range tc.aggs {
					aggs = append(aggs, fmt.Sprint("agg-", a))
				}
				st.add(aggs, 3)
				var logs bytes.Buffer
				r, err := outbox.NewRelay(st, &slowPublisher{took: ms(3)}, outbox.WithBatchSize(10), outbox.WithMaxInFlight(1),
					outbox.WithOrdering(tc.ordered, outbox.DeadBlocks), outbox.WithRelayTTL(9*time.Second),
					outbox.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
				require.NoError(t, err)
				// A first heartbeat at once, the next 0.45 s later (the view
				// changed: it had none), then every 3 s ± 20%: 11 to 15 in 35 s.
				runFor(t, r, 35*time.Second, nil)
				st.mu.Lock()
				defer st.mu.Unlock()
				if tc.wantBeats == [2]int{} {
					require.Empty(t, st.beats)
				} else {
					require.GreaterOrEqual(t, len(st.beats), tc.wantBeats[0], "heartbeats at %v", st.beats)
					require.LessOrEqual(t, len(st.beats), tc.wantBeats[1], "heartbeats at %v", st.beats)
					require.Zero(t, st.beats[0], "the first heartbeat at start")
				}
				require.Equal(t, tc.wantLeaves, st.leaves, "leaves")
				claims := make([][2]int, len(st.claims))
				for i, c := range st.claims {
					claims[i] = [2]int{c.rows, 0}
				}
				tc.wantPrefs(t, st.prefs, claims)
				require.Equal(t, tc.wantWarning, strings.Count(logs.String(), `msg="no table of relays`), logs.String())
			})
		})
	}
}

func noPreference(t *testing.T, prefs, _ [][2]int) {
	for i, p := range prefs {
		require.Equal(t, [2]int{0, 0}, p, "claim %d", i)
	}
}
