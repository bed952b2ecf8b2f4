package liblog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each hook writes one Warn record with the library as its component, to the
// logger set last; once unset, nothing reaches that logger.
func TestHooksWriteToTheLogger(t *testing.T) {
	var buf bytes.Buffer
	unset := SetLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	for _, tc := range []struct {
		name, component, msg string
		log                  func()
	}{
		{"Redis", "redis", "redis: connection pool: failed to dial after 5 attempts: refused",
			func() {
				redisLogger{}.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
			}},
		{"MySQL", "mysql", "closing bad idle connection: EOF",
			func() { mysqlLogger{}.Print("closing bad idle connection: ", "EOF") }},
		{"Log", "log", "http: TLS handshake error",
			func() { _, _ = lineWriter{}.Write([]byte("http: TLS handshake error\n")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			tc.log()
			var rec map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
			require.Equal(t, "WARN", rec["level"])
			require.Equal(t, tc.component, rec["component"])
			require.Equal(t, tc.msg, rec["msg"])
		})
	}
	unset()
	buf.Reset()
	SetLogger(slog.New(slog.DiscardHandler))()
	require.Nil(t, current.Load(), "unset clears its own logger")
	redisLogger{}.Printf(context.Background(), "to stderr")
	require.Zero(t, buf.Len())
}
