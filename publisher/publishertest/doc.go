// Package publishertest is the conformance suite that every
// [outbox.Publisher] adapter runs against its real broker, so that all
// adapters keep the same contract: one result per message, nothing lost or
// altered on the way, the broker's own promises (order per key, dedup,
// size limits) kept, and outages reported quickly and classified the way the
// relay expects.
//
// # Plugging in an adapter
//
// An adapter's test is mostly one call. [Harness.New] builds a fresh
// destination (a stream, topic, queue or key named by testsvc.Name) with a
// publisher on it and a [Receiver] that reads it back through a real
// consumer; [Features] says what the broker guarantees:
//
//	func TestSuite(t *testing.T) {
//		publishertest.Run(t, publishertest.Features{
//			OrderedPerKey: true, Dedup: true, Headers: true,
//			MaxPayload: 1<<20 - 4096, TooLargePayload: 1<<20 + 1,
//		}, publishertest.Harness{
//			New: func(t *testing.T) publishertest.Dest {
//				topic := testsvc.Name(t)
//				// create the destination, delete it in t.Cleanup
//				return publishertest.Dest{Publisher: pub, Receiver: recv, Topic: topic}
//			},
//			Outage: func(t *testing.T) publishertest.OutageDest {
//				proxy := faultproxy.New(t, brokerAddr) // the client dials proxy.Addr()
//				// ...
//				return publishertest.OutageDest{Dest: d, Cut: proxy.Cut,
//					Restore: proxy.Restore, Stall: proxy.Blackhole}
//			},
//		})
//	}
//
// A push-style consumer (an HTTP handler, a delivery loop, a subscription
// callback) can hand what it gets to a [Collector], which is a Receiver.
//
// # What it checks
//
// Each case is a parallel subtest with its own destination:
//
//   - OneResultPerMessage: a batch returns exactly one nil result per message,
//     an empty batch none, and every message arrives.
//   - MessageArrivesIntact: message id, key, topic and payload (byte for
//     byte), and with [Features.Headers] every standard header, traceparent,
//     tracestate and the caller's own headers.
//   - BinaryPayloadAndContentType ([Features.ContentType]): payloads that
//     are not UTF-8 (a protobuf-like one, every byte value 0..255) and not
//     JSON arrive byte for byte with their content type; MessageArrivesIntact
//     then also checks that a JSON message arrives as application/json.
//   - OrderPerKey ([Features.OrderedPerKey]): batches of interleaved keys
//     arrive in publish order per key.
//   - ResendIsConfirmed: re-sending the same message ids is confirmed, not
//     refused; with [Features.Dedup] the broker drops the copies.
//   - LargePayload ([Features.MaxPayload]) and TooLargePayloadIsPermanent
//     ([Features.TooLargePayload]): the large one arrives; the one over the
//     broker's limit fails with [outbox.Permanent] and never arrives, and its
//     batch-mates do not fail. Without [Features.Dedup] a batch-mate may
//     arrive twice (at least once); a refused or unknown message never may.
//   - CancelledContext: a cancelled ctx returns at once with an error per
//     message, none permanent, and the publisher stays usable.
//   - ConcurrentPublish: Publish from several goroutines at once.
//   - BrokerDown ([Harness.Down]), OutageCutAndRestore and
//     OutageStallAndRestore ([Harness.Outage]): a broker that is gone fails
//     every message within the ctx deadline, classified [outbox.Unavailable]
//     (a silent one may also report the deadline, which the relay treats
//     alike), Ping fails too, and after Restore the same publisher works
//     again without being rebuilt.
package publishertest
