// Package natspub publishes outbox messages to NATS JetStream.
//
// It wraps a jetstream.JetStream the caller built and never closes it:
//
//	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
//	js, err := jetstream.New(nc)
//	err = natspub.EnsureStream(ctx, js, "OUTBOX", []string{"outbox.>"}, 0)
//	pub, err := natspub.New(js, natspub.WithSubjectPrefix("outbox."))
//	relay, err := outbox.NewRelay(store, pub)
//
// # Messages
//
// A message goes to the subject prefix + [outbox.Message.Destination] (its
// Topic, else its EventType). Its MessageID travels as the Nats-Msg-Id
// header, so the stream drops a re-send within its duplicate window; the
// standard outbox headers (message id, aggregate type and id, event type,
// traceparent, tracestate) and the caller's own headers travel as NATS
// headers, with Content-Type ([HeaderContentType]) for the payload's media
// type. NATS trims leading and trailing whitespace from header values and
// turns line breaks into spaces.
//
// # Batches and acknowledgements
//
// [Publisher.Publish] sends a whole batch asynchronously and then waits for
// every acknowledgement within the caller's ctx, so a batch costs about one
// round trip. Messages of one publisher reach the stream in the order they
// were published, which keeps each aggregate's order.
//
// # Duplicate window
//
// The stream's duplicate window must outlast the relay's lease plus the
// backoff before a retry, or a message re-sent after a crash is stored twice
// (consumers still drop it by message id). [EnsureStream] sets
// [DefaultDuplicateWindow] (10 minutes) instead of the server's 2 minutes.
//
// # Errors
//
// What retrying cannot fix is marked [outbox.Permanent]: a payload over the
// server's max_payload (which counts headers too, so a payload of exactly
// max_payload never fits) or over the stream's max message size, an invalid
// subject, an invalid header name. What hits the whole destination is marked
// [outbox.Unavailable]: a connection closed or not connected, and a subject
// that no stream captures (no responders), so the relay pauses instead of
// spending every message's attempts. That last is also marked
// [outbox.Unroutable], which a router route with UnroutablePermanent turns
// into Permanent (dead at once). An acknowledgement that does not come
// before ctx ends is a plain error wrapping ctx.Err() (Unavailable when the
// connection is down by then); the relay treats a batch that timed out as a
// whole as unavailable.
package natspub
