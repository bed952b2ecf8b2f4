// Package cepub publishes outbox messages as CloudEvents 1.0 through any
// other outbox publisher.
//
// [New] wraps a publisher (kafkapub, amqppub, natspub, webhookpub, mqttpub,
// redispub) and names its protocol [Binding]. Each message becomes an event
// whose attributes are:
//
//	specversion      1.0
//	id               the message id
//	source           the source given to New (the daemon: /outbox/<table>)
//	type             the event type
//	subject          the aggregate id
//	time             when the message was written (absent when unknown)
//	datacontenttype  the message's content type (application/json unless set)
//	aggregatetype    the aggregate type (extension)
//	partitionkey     the partition key (the Partitioning extension)
//	traceparent, tracestate  the W3C trace context, when the message has one
//	                 (the Distributed Tracing extension)
//
// # Modes
//
// In [Binary] mode the payload is the event's data, untouched, the content
// type travels the way the inner publisher carries it (Kafka content-type
// header, AMQP content-type property, NATS Content-Type and content-type
// headers, HTTP Content-Type), and every other attribute is a header with
// the binding's prefix: ce- for HTTP and NATS, ce_ for Kafka, cloudEvents:
// for AMQP (an application property in AMQP 1.0; amqppub's headers table
// in AMQP 0-9-1). The message's own headers, outbox-* included, still go too.
//
// In [Structured] mode the payload is the event as JSON, with content type
// [ContentTypeStructured], its data under "data" (a JSON payload, byte for
// byte) or "data_base64" (any other payload, standard base64). MQTT 3.1.1,
// which mqttpub speaks, has only this mode (binary mode needs MQTT 5 user
// properties), and so has a broker without a binding ([None], Redis).
//
// The inner publisher must send the payload as it is: webhookpub with
// WithRawBody, mqttpub with WithRawPayload; the others always do.
package cepub
