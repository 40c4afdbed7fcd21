// Package sinktest is the conformance suite for sinks: every sink of this project runs
// it in its tests, and so can a sink you write yourself.
//
// A sink is a core.Relay that sends messages to a broker. The suite checks what the
// engine and your consumers rely on: order per group over thousands of messages,
// partial failures that name exactly what was not delivered, recovery after transient
// errors and after the broker was down, payloads and headers that arrive unchanged,
// batches larger than the broker takes at once, and oversize messages refused with
// core.Permanent instead of blocking their group forever.
//
// # Using it
//
// Write a Harness whose New gives each case a fresh destination (a topic, a queue) with
// the relay writing to it and a Read function reading it back, and call Run from a test:
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, sinktest.Harness{
//			New: func(t *testing.T) *sinktest.Target {
//				topic := newTopic(t)            // a destination of its own
//				relay := mysink.New(topic)      // the sink under test
//				reader := newReader(t, topic)   // reads the destination back
//				return &sinktest.Target{Relay: relay, Read: reader.Read}
//			},
//			BatchLimit:      10,      // the broker's own limit per call, if it has one
//			MaxMessageBytes: 256 << 10, // the largest payload the sink accepts
//			Parallel:        true,
//		})
//	}
//
// Read decodes what arrived into Received: the envelope's ID, outbox, type, group key,
// payload and headers as your sink carries them (the suite needs the ID to check order).
// It is cumulative and waits: Read(ctx, n) returns once at least n messages arrived.
//
// Abilities a harness may lack are optional fields: Target.FailNext (inject transient
// broker errors), Target.Stop and Target.Start (take the broker down and back up),
// Harness.BatchLimit and Harness.MaxMessageBytes. A case that needs one the harness does
// not have is skipped with a message naming the field. Run lists the cases.
//
// The "Poison" case runs the real engine: give Harness.DB (a fresh database per call)
// and Harness.Poisons (payloads your relay's destination refuses for good, saying
// whether the sink reports the refusal with core.Permanent), and it checks bounded
// retries, the dead letter's reason, other groups flowing, and Discard freeing a group
// that a poison blocks.
//
// Drive and Outcome replay the engine's rules for a relay's result without a database:
// use them in your own sink's tests to deliver a backlog the way the engine would.
package sinktest
