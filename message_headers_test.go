package outbox

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStandardHeadersSeq checks that the iterator yields the pairs of
// StandardHeaders, each name once, however the caller's own headers collide
// with the standard ones, and that it stops when asked to.
func TestStandardHeadersSeq(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		key     string
		headers map[string]string
	}{
		{"NoHeaders", "", nil},
		{"OwnHeaders", "", map[string]string{"x": "y", HeaderTraceparent: "00-abc"}},
		{"Spoofed", "", map[string]string{HeaderMessageID: "spoofed", HeaderEventType: "X", HeaderPartitionKey: "mine"}},
		{"SpoofedKey", "tenant-1", map[string]string{HeaderPartitionKey: "mine", HeaderAggregateID: "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := validMsg()
			m.MessageID, m.PartitionKey, m.Headers = "id-1", tc.key, tc.headers
			seen := map[string]string{}
			for k, v := range m.StandardHeadersSeq() {
				require.NotContains(t, seen, k, "name yielded twice")
				seen[k] = v
			}
			require.Equal(t, m.StandardHeaders(), seen)
			require.Equal(t, tc.headers, m.Headers, "StandardHeadersSeq must not modify the message")

			n := 0
			for range m.StandardHeadersSeq() {
				if n++; n == 2 {
					break
				}
			}
			require.Equal(t, 2, n)
		})
	}
	require.Len(t, maps.Collect(validMsg().StandardHeadersSeq()), 4)
}
