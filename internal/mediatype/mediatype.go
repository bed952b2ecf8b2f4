// Package mediatype holds the one rule for what the outbox takes as a
// message's content type, shared by the Writer, which refuses a bad one,
// and the stores, which make a row that carries one dead.
package mediatype

import (
	"fmt"
	"mime"
	"strings"
)

// Check returns nil when s is a media type (RFC 6838): a type/subtype, with
// parameters if any, as mime.ParseMediaType reads it.
func Check(s string) error {
	if _, _, err := mime.ParseMediaType(s); err != nil {
		return fmt.Errorf("%q is not a media type: %w", s, err)
	}
	if !strings.Contains(s, "/") {
		return fmt.Errorf("%q is not a media type: it has no type/subtype", s)
	}
	return nil
}
