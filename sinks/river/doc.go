// Package riversink relays outbox messages into River, the PostgreSQL job queue: one
// River job per message, inserted with one InsertMany per batch.
//
// The import path ends in river; the package is named riversink so that it does not
// shadow River's own package.
//
// # Same database: exactly once
//
// When River's tables live in the outbox's PostgreSQL database, use NewTx with a River
// client on the database/sql driver. The engine then calls DeliverTx with its own
// transaction, the one in which it removes the delivered outbox rows: the jobs and the
// removal commit together or not at all, so a crash at any point neither loses a message
// nor inserts a job twice. The client only inserts; it needs no pool of its own, and the
// workers run on any other River client (riverpgxv5) on the same database:
//
//	inserter, _ := river.NewClient(riverdatabasesql.New(nil), &river.Config{})
//	sink, err := riversink.NewTx(inserter, riversink.Options{
//		InsertOpts: river.InsertOpts{Queue: "orders"},
//	})
//	// core.OutboxConfig{Relay: sink, ...}
//
// A failed insert is rolled back to a savepoint, so the engine can still record the
// failure in its transaction.
//
// # Another database: at least once, repeats dropped
//
// With River elsewhere, use New with any River client that has a pool. Deliver inserts
// outside the outbox's transaction, so a crash after the insert and before the rows are
// removed hands the batch over again. To drop such repeats, every job is a River unique
// job keyed on its outbox row: the encoded args get the key UniqueArgKey
// ("<table>/<id>"), River's unique-by-args check looks at that key only, and a second
// insert of the row is skipped as a duplicate. River keeps the uniqueness while the first
// job is in a state of UniqueOpts.ByState (by default until it is completed and cleaned
// away, 24 hours later), which bounds the window in which a repeat is caught.
//
// # The job
//
// By default the args are a Job: the envelope's ID, outbox, type, group key, headers
// and payload (which must then be JSON, the default codec's output). Options.Job builds
// other args per message, and may return insert options for it; Options.InsertOpts
// apply to the whole outbox (queue, priority, max attempts, tags); Options.Kind
// overrides the kind of every job. Each job's metadata carries outboxer_id and
// outboxer_outbox.
//
// # Order
//
// The jobs of a batch are inserted in outbox order, so River's job IDs follow it. River
// runs a queue's jobs in that order only when the queue has a single worker
// (QueueConfig{MaxWorkers: 1}) on a single client; with more, jobs of one group can run
// concurrently or overtake each other, and a job that fails and is retried runs after
// the later ones. Give ordered outboxes a queue of their own with one worker.
//
// A message whose args cannot be built fails alone (permanently when the error says
// so) and holds back the rest of its group; set Options.Ordering to the outbox's
// Ordering so that the sink holds back what the engine will.
//
// # Trace context
//
// A job's metadata also carries the envelope's headers as a JSON object under
// MetadataHeaders ("outboxer_headers"), whatever Options.Job builds: the publisher's
// trace context (W3C traceparent and tracestate, which package outboxerotel stores when
// publishing is traced) among them. A worker continues the trace from it:
//
//	var md struct{ Headers map[string]string `json:"outboxer_headers"` }
//	_ = json.Unmarshal(job.Metadata, &md)
//	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(md.Headers))
package riversink
