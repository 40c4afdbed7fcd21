// Package core is Outboxer's engine and public API: a transactional outbox for Go.
//
// A service writes a message into an outbox table in the same database transaction as its
// business data. The message exists if and only if that transaction commits. Outboxer then
// relays it to a broker (Kafka, SQS, Watermill, River, or any Relay), in order per group
// key, retrying until it gets through.
//
// # Setting up
//
// Create the tables once, with Migrate (or apply MigrationSQL's text with your migration
// tool), then describe the outboxes:
//
//	err := core.Migrate(ctx, db, core.MigrateOptions{})
//	ob, err := core.New(core.Config{
//		DB: db, // *sql.DB: PostgreSQL (pgx), MariaDB (go-sql-driver/mysql) or SQLite
//		Outboxes: map[string]core.OutboxConfig{
//			"orders": {Relay: kafkaRelay, Partitions: 4, MaxAttempts: 10},
//		},
//	})
//	go func() {
//		// Delivers until ctx is done, then returns nil. An error means the relay never
//		// ran: logged, it is not silent.
//		if err := ob.Run(ctx); err != nil {
//			log.Printf("outboxer relay not running: %v", err)
//		}
//	}()
//
// New validates everything and returns a *ConfigError naming the option it refuses.
//
// # Starting
//
// Run waits for what a deployment brings up late. When the database does not answer, the
// tables are not migrated yet (ErrNotMigrated) or a relay's Start fails, Run logs an Error
// line with the error and the time of the next try, and tries again, from 100 ms apart up
// to 30 s, until it starts or ctx is done; then it returns an error matching ctx's error
// that also wraps the last failure. It returns at once, logged, only what waiting cannot
// fix: ErrRepartitioned, ErrShapeMismatch, an invalid configuration, a Starter's error
// marked Permanent, and ErrAlreadyRunning. Run in an errgroup (golang.org/x/sync/errgroup)
// stops the service when the relay cannot start:
//
//	g, ctx := errgroup.WithContext(ctx)
//	g.Go(func() error { return ob.Run(ctx) })
//	g.Go(func() error { return serveHTTP(ctx) })
//	err := g.Wait()
//
// # Publishing
//
// A message is any value with an Outbox method; GroupKey, Headers and MessageType are
// optional. Publish it with the transaction of the business write:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, `INSERT INTO orders ...`)
//	env, err := ob.Publish(ctx, tx, OrderPlaced{ID: 42}, core.WithHeaders(h))
//	tx.Commit()
//
// InTx does the same with rollback on error or panic, and wakes the relay at commit.
// PublishAll writes many messages in one INSERT. On a handle that is not a transaction
// the messages are stored at once, all or none, unless Config.RequireTransaction is set.
// Publishing never waits for a broker.
//
// # How order is kept
//
// Every message gets an increasing ID. Its group key is hashed (PartitionFor) to one of
// the outbox's partitions. Each partition has one worker in the whole cluster, holding a
// lease in the database; the worker hands the partition's pending messages to the relay in
// ID order and removes them only once the relay confirmed them. So within a group,
// message n+1 never reaches the relay before message n was confirmed. The confirmation
// runs in a transaction that first checks the lease: a worker that lost its partition (a
// pause, a network split) changes nothing, and the next owner delivers the batch again.
// A crash costs at most one batch delivered twice, in order.
//
// Ordering modes (OutboxConfig.Ordering): OrderGroup (the default) keeps order per group
// key, and messages without a key neither block nor are blocked; OrderTotal keeps one
// order for the outbox (one partition; a failure stops everything behind it); OrderNone
// keeps none.
//
// # When a message fails
//
// A failed message gets its attempts counted, its error kept, and a retry time (Backoff,
// exponential from 1 s to 60 s by default). Until then its group waits; every other group
// flows. With MaxAttempts 0 (the default) it is retried forever: order is never broken, and
// the group stays blocked until the message goes through or you Discard it. With
// MaxAttempts n it becomes Dead after n failures and its group moves on; RetryDead puts it
// back with its old ID. A relay error wrapped with Permanent is dead at once.
//
// # Writing a relay
//
// A Relay gets a batch and says, with a *PartialFailure, which messages it did not
// deliver; a message it did not try, because an earlier one of its group failed, is named
// with ErrHeldBack so that no attempt is counted. PerMessage writes that bookkeeping for
// you from a function that delivers one message, for the outbox's Ordering. Filter (drop
// messages), Map (change them before they go) and FanOut (deliver to several relays) wrap
// relays and keep the same rules; they forward Start and Close to the relays they wrap.
//
//	relay := core.Filter(
//		core.PerMessage(core.OrderGroup, func(ctx context.Context, env core.Envelope) error {
//			return webhook.Post(ctx, env.Payload) // one call per message
//		}),
//		func(env core.Envelope) bool { return env.Type != "internal.Ping" },
//	)
//
// # Operations
//
// Counts, ListPending, ListDead, Discard, RetryDead, Pause, Resume and Status work on any
// instance, also a PublishOnly one, and act on every node sharing the table. The
// outboxer command does the same from a shell.
//
// # Several nodes
//
// Start the same outboxes on every node. Nodes that only publish set PublishOnly; they
// start nothing and need no relay. Relay nodes share the partitions: every running
// instance heartbeats into the table's "_nodes" table, and each holds its fair share of
// every outbox's partitions (Config.MaxPartitions caps it or opts out). When a node joins
// or leaves, only the partitions beyond a share move, each after its batch in flight is
// confirmed. A crashed node's partitions are taken over within about LeaseDuration +
// LeaseDuration/4 (25 s by default), a node that stops gracefully hands them over at
// once. Health lists the live nodes and what each holds. With Notify (PostgreSQL
// and the pgx driver) on the relays, a commit wakes the partition's worker on whichever
// node it runs; otherwise workers poll every PollInterval, and a publish through the same
// instance wakes its own workers.
//
// What the nodes must agree on is recorded in the database by the relays, and every node
// follows the record: the partition count, the ordering, and whether the relays listen
// for notifications. A publishing node places messages by the recorded count and ordering
// and notifies when the relays listen, whatever its own configuration says. A relay whose
// Partitions or Ordering differs from the record is refused (ErrRepartitioned,
// ErrShapeMismatch) while another relay runs or messages are pending, unless
// AllowRepartition is set; otherwise it changes the record.
//
// A relay listens on a connection of Config.DB (the pgx driver), or on sessions of its
// own from Config.NotifyListener: behind a pooler in transaction mode (PgBouncer, RDS
// Proxy, Supavisor), where LISTEN does not stay on a session, or with another driver.
// Every new session is checked (a channel of its own in pg_listening_channels(), and a
// test notification that must reach it); one that fails is logged at Warn
// (ErrNotifyNotListening) and the workers poll until a later session passes.
// NotifyStatus says whether the instance listens now.
//
// # Testing
//
// With Manual set, nothing runs in the background: Drain delivers what is deliverable,
// synchronously. Package coretest has recording and failing relays; package sinktest
// checks a Relay of your own against the rules above.
//
// # Telemetry
//
// Hooks receive the events publish, batch start/stop/exception, message retry, message
// dead and prune, with the reference's metadata. The engine logs through Config.Logger
// (log/slog): failures at Info, dead messages and lost partitions at Warn.
package core
