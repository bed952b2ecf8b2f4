package inbox

import "context"

// Filter is a fast, fallible pre-check in front of the inbox table (see
// [WithFilter]; package inbox/redisfilter has one on Redis). The inbox calls Claim before its transaction; after it,
// Done when the message is known committed (processed now or a duplicate
// found in the table) or Release with Claim's token when the handler failed
// or the outcome is unknown. Errors are never fatal: the inbox logs them and
// goes to the database. Implementations are safe for concurrent use.
type Filter interface {
	// Claim reports done = true only when the message is certainly committed,
	// so the inbox may skip it without asking the database. Otherwise it may
	// mark the message in flight and return a non-empty token for Release.
	Claim(ctx context.Context, consumer, messageID string) (done bool, token string, err error)
	// Done remembers that the message is committed.
	Done(ctx context.Context, consumer, messageID string) error
	// Release forgets the in-flight mark made by the Claim that returned
	// token, unless something else (Done, another claim) replaced it.
	Release(ctx context.Context, consumer, messageID, token string) error
}
