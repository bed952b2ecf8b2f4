package pgstore

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeHeaders checks that decodeHeaders, with its fast path for plain
// objects of strings, gives what json.Unmarshal gives: the same map, and an
// error exactly when json.Unmarshal fails.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{
		`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=x"}`,
		` { "a" : "b" , "a" : "c" } `, `{}`, ` {	}
`, `null`, `[]`, `{"k":1}`, `{"k":"v",}`, `{"k":"v"} x`, `{"k":"\u00e9"}`, `{"k":"é"}`, "{\"k\":\"\xff\"}",
		"{\"k\":\"a\tb\"}", `{"k":"v"`, `{"k" "v"}`, `{"k":null}`, `{,}`, ``, `"s"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want map[string]string
		wantErr := json.Unmarshal([]byte(s), &want)
		var got map[string]string
		err := decodeHeaders(s, &got)
		if wantErr != nil {
			require.EqualError(t, err, wantErr.Error())
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, want, got)
		require.Equal(t, want == nil, got == nil)
	})
}
