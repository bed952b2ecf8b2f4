// Package redispub publishes outbox messages to Redis Streams with go-redis
// v9: one XADD per message, a whole batch in one pipeline.
//
// [New] wraps a client the caller built and closes; [NewClient] builds one
// from a redis:// URL with the settings the Publisher relies on (context
// deadlines honoured, no client-side retries).
//
// # Entries
//
// A message goes to the stream prefix + [outbox.Message.Destination] (its
// Topic, else its EventType; see [WithStreamPrefix]) as an entry with an id
// chosen by Redis and these fields:
//
//	message_id      the outbox message id (consumers deduplicate on it)
//	key             the partition key: the aggregate id unless one is set
//	aggregate_type  the aggregate type
//	aggregate_id    the aggregate id
//	event_type      the event type
//	headers         a JSON object of strings: outbox.Message.StandardHeaders
//	                (the fields above as outbox-* headers, traceparent,
//	                tracestate and the caller's own headers)
//	payload         the payload, byte for byte (any bytes)
//	content_type    the payload's media type (application/json unless set)
//	created_at      when the row was written, RFC 3339 in UTC (if known)
//
// The headers travel as one JSON field rather than one field per header, so
// that a caller's header can never collide with the fields above. The
// [FieldMessageID] ... [FieldCreatedAt] constants name the fields for
// consumers.
//
// [WithMaxLen] trims streams as they grow (XADD MAXLEN ~ N).
//
// # Dedup
//
// With [WithDedup] each message goes through a small Lua script instead of a
// bare XADD: it appends the entry only if the message id's dedup key is
// absent, then sets that key (holding the entry id) with a TTL, all
// atomically. A re-send within the TTL, after a relay crash or a lost reply,
// is confirmed without a second entry. The script needs Redis 5 or later
// (streams); it is loaded on first use and again if the server forgets it.
//
// # Errors
//
// A payload over [WithMaxPayloadSize] is [outbox.Permanent]. A connection that
// fails and a server that cannot take writes (WRONGTYPE at the stream key,
// OOM, READONLY, LOADING, NOAUTH, ...) are [outbox.Unavailable]. An entry not
// confirmed when the context ends gets a plain error wrapping ctx.Err(); the
// pipeline is left to finish in the background ([Publisher.Close] waits for
// it), so a late append is possible and is a duplicate that the message id
// or dedup takes care of.
package redispub
