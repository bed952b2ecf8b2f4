// Package faultproxy is an in-process TCP proxy for tests and the demo: it
// listens on 127.0.0.1 and a random port, forwards every connection to a
// target, and can break the network between them on command.
//
// # Modes
//
//   - [Pass] forwards bytes both ways; [Proxy.Latency] adds a delay to each
//     direction.
//   - [Blackhole] keeps the sockets open and forwards nothing, like a network
//     partition: clients wait for answers that never come until their own
//     timeouts fire. Bytes read meanwhile are held, not dropped, and
//     delivered in order when the proxy is restored.
//   - [Reset] ([Proxy.Cut]) closes every connection with a TCP RST and resets
//     new ones as soon as they are accepted, like a crashed broker.
//
// [Proxy.Restore] goes back to Pass; clients reconnect on their own.
//
// # Use
//
// In a test, [New] starts a proxy that stops with the test:
//
//	p := faultproxy.New(t, "127.0.0.1:4222")
//	nc, err := nats.Connect("nats://" + p.Addr())
//	...
//	p.Cut()     // the broker is gone
//	p.Restore() // and back
//
// Outside tests (the demo), [Start] returns a proxy that the caller closes.
//
// # Limits
//
// A proxy holds at most [DefaultMaxConns] connections and at most 512 KiB
// per direction of each (the reader stops reading when the writer is held),
// and [Proxy.Close] waits for every goroutine it started.
package faultproxy
