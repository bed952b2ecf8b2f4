package daemon

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/outboxkit/outbox/internal/termsafe"
)

// NewLogger returns the daemon's logger, writing to w at level (debug, info,
// warn, error) in format (text or json). Every record carries its source
// component as an attribute, never a DSN, a secret or a payload. No record
// reaches w with a rune a terminal takes as a command: the text handler
// quotes them, and the JSON one, which lets DEL, C1 controls and bidi
// overrides through, has its output escaped by termsafe (still valid JSON).
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	w = termsafe.NewWriter(w)
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q is not text or json", format)
}
