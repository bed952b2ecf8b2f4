// Package mqttpub publishes outbox messages to an MQTT broker (Mosquitto,
// EMQX, HiveMQ, ...) at QoS 1 with the Eclipse Paho client.
//
// [New] wraps a paho client that the caller built, connected and
// disconnects; [Connect] makes one from an mqtt:// or mqtts:// URL, with
// automatic reconnection.
//
// # Messages
//
// A message goes to the topic prefix + [outbox.Message.Destination] (its
// Topic, else its EventType; see [WithTopicPrefix]), at QoS 1, not retained
// by default. MQTT 3.1.1 has no message headers, so the body is an
// [Envelope], JSON that carries what other brokers put in headers:
//
//	{"id": "<message id>", "type": "<event type>", "topic": "<destination>",
//	 "key": "<partition key>", "aggregate": {"type": "...", "id": "..."},
//	 "content_type": "<the payload's media type>",
//	 "payload": <a JSON payload, byte for byte>,
//	 (or "payload_base64": "<any other payload, standard base64>"),
//	 "headers": {"outbox-message-id": "...", "traceparent": "...", ...},
//	 "created_at": "<RFC 3339, when known>"}
//
// Consumers deduplicate on "id": QoS 1 is at least once, and so is the outbox.
//
// [WithRawPayload] sends the payload alone instead, for consumers that read
// it as it is. The paho client speaks MQTT 3.1.1, which has no headers and
// no content type property: the MQTT 5 content type and user properties
// would carry them, but this client cannot send MQTT 5, so a raw message
// carries nothing but its topic and payload.
//
// # Results
//
// A nil result means the broker sent PUBACK. An invalid topic or an envelope
// over [WithMaxMessageSize] is [outbox.Permanent]; a client that is not
// connected, or a connection lost before the PUBACK, is
// [outbox.Unavailable]; no PUBACK before the context ends is a plain error
// wrapping ctx.Err(), marked Unavailable when the connection is down by then.
package mqttpub
