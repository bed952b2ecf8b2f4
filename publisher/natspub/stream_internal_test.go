package natspub

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, subj string
		want          bool
	}{
		{"orders", "orders", true},
		{"orders", "orders.paid", false},
		{"orders.>", "orders.paid", true},
		{"orders.>", "orders.paid.eu", true},
		{"orders.>", "orders.*", true},
		{"orders.>", "orders.>", true},
		{"orders.>", "orders", false},
		{"orders.*", "orders.paid", true},
		{"orders.*", "orders.*", true},
		{"orders.*", "orders.>", false},
		{"orders.*", "orders.paid.eu", false},
		{"*.paid", "orders.paid", true},
		{">", "anything.at.all", true},
		{"orders.paid", "orders.*", false},
		{"payments.>", "orders.paid", false},
	} {
		require.Equal(t, tc.want, covers(tc.pattern, tc.subj), "covers(%q, %q)", tc.pattern, tc.subj)
	}
}
