// Package config reads the configuration of the outbox daemon (`outbox relay`)
// from a YAML file and OUTBOX_* environment variables.
//
// # Sources and precedence
//
// Every scalar setting has three names, listed by [Settings]: a YAML key
// (batch_size), a flag (--batch-size, added by the CLI) and an environment
// variable (OUTBOX_BATCH_SIZE). A flag beats the environment, which beats the
// file, which beats the defaults ([Default], built from the outbox package's
// Default* constants). Brokers and routes, being lists, come from the file
// only, except for the one-broker shorthand (broker:, --broker, OUTBOX_BROKER).
//
// # Strictness
//
// [Load] and [Parse] decode strictly: an unknown key, a value of the wrong
// type, or a second YAML document is an error naming its line and key.
// [Config.Validate] then checks the values and reports every problem at once,
// each naming its key.
//
// # Secrets
//
// Database URLs, broker URLs and webhook signing secrets are held in a
// [Secret], which prints redacted (the password of a URL is replaced by
// REDACTED) so a config can be logged or shown in an error safely.
//
// # Example file
//
//	db: postgres://outbox:secret@db.internal:5432/shop
//	table: outbox_message
//	name: shop-relay
//	http: "127.0.0.1:9090"
//	relays: 2
//	batch_size: 200
//	poll_interval: 500ms
//	brokers:
//	  - name: events
//	    url: nats://nats.internal:4222
//	    stream: ORDERS
//	    prefix: "orders."
//	  - name: partners
//	    url: https://partner.example.com/hooks
//	    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
//	routes:
//	  - event_type: "PARTNER_*"
//	    broker: partners
//	default_route:
//	  broker: events
//	  topic: "{{.AggregateType}}.{{.EventType}}"
package config
