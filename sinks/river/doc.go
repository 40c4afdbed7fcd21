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
// failure in its transaction (see "Jobs the database refuses").
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
// # Jobs the database refuses
//
// One InsertMany fails or succeeds as a whole, so a single job PostgreSQL refuses would
// fail every message of its batch. The sink keeps such a message from failing the
// others in two steps:
//
//   - Before inserting, it checks every job's encoded args and metadata for what
//     PostgreSQL's jsonb refuses: a \u0000 escape, an unpaired UTF-16 surrogate escape,
//     invalid UTF-8. Such a message fails alone with ErrNotJSONB, permanently (the
//     engine makes it dead at its first attempt), and the rest of the batch is inserted.
//   - When PostgreSQL still refuses the data of an InsertMany of several jobs (SQLSTATE
//     class 22, a check or not-null constraint, a size limit: a refusal the check
//     cannot foresee, such as a number too large for PostgreSQL's numeric), nothing of
//     it was inserted, and the sink inserts the jobs again one at a time, in order; with
//     TxSink each in a savepoint of its own, so the outbox's transaction stays usable.
//     A job PostgreSQL then refuses fails alone, permanently. A job that fails alone
//     for another reason fails with an ordinary error, which the engine retries, and
//     holds back the rest of its group (ErrEarlierFailed, no attempt counted); other
//     groups go on. Once ctx is done the sink stops trying.
//
// Any other failure of the InsertMany (the connection, a timeout, River refusing its
// insert options) fails the batch as a whole, as it inserted nothing: the engine
// counts an attempt for each group's first message and retries. Build per-message
// insert options in Options.Job that River accepts (a queue name and tags of its
// format); the sink itself refuses a priority or max attempts River would refuse, for
// that message alone.
//
// The fallback costs one round trip per job (three with TxSink), only for a batch
// PostgreSQL refused.
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
//
// # CloudEvents
//
// River has no content modes: with Options.CloudEvents the args stay what Options.Job
// builds, and each job's metadata gets the message's CloudEvent 1.0 under
// MetadataCloudEvent ("cloudevent"), in the JSON event format without data: id (the
// message key, MetadataKey), source (CloudEvents.Source), type, subject (the group key),
// time, datacontenttype, and the headers as extensions. A worker that passes events on
// unmarshals it with any CloudEvents SDK. A message that cannot have a valid CloudEvent
// (see ErrNotCloudEvent) goes dead at once.
//
// # Working with the inbox
//
// Every job's metadata carries MetadataKey (outboxer-key), the key a worker deduplicates
// on. NewInboxWorker wraps a handler as a River worker whose work runs in a database
// transaction that first claims the key in an inbox.Inbox, so a job that runs again
// does not repeat its effect; the job completes after the commit.
//
// A job without MetadataKey (one the application inserted of the same kind itself)
// cannot be deduplicated and does not reach the handler: the OnForeign option, an
// inbox.ForeignPolicy, decides. By default (inbox.SkipForeign) the job completes with
// a warning; inbox.StopOnForeign fails it with an error matching inbox.ErrNoKey (River
// retries it, then discards it); a function of yours can dead-letter it first (see
// ExampleOnForeign).
package riversink
