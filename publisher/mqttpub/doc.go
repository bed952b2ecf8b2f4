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
//	 "payload": <the payload, byte for byte>,
//	 "headers": {"outbox-message-id": "...", "traceparent": "...", ...},
//	 "created_at": "<RFC 3339, when known>"}
//
// Consumers deduplicate on "id": QoS 1 is at least once, and so is the outbox.
//
// # Results
//
// A nil result means the broker sent PUBACK. An invalid topic or an envelope
// over [WithMaxMessageSize] is [outbox.Permanent]; a client that is not
// connected, or a connection lost before the PUBACK, is
// [outbox.Unavailable]; no PUBACK before the context ends is a plain error
// wrapping ctx.Err(), marked Unavailable when the connection is down by then.
package mqttpub
