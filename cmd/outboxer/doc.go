// Command outboxer inspects and repairs Outboxer outbox tables, and runs a standalone
// relay for services that only insert rows (services not written in Go included).
//
// Install it with go install github.com/outboxer-go/outboxer/cmd/outboxer@latest.
//
// # Connecting
//
// Every command takes --dsn (or the environment variable OUTBOXER_DSN):
//
//	postgres://user:password@host:5432/db?sslmode=disable   PostgreSQL (pgx); search_path is honoured
//	host=127.0.0.1 user=app password=secret dbname=db       PostgreSQL, libpq keyword/value form
//	mysql://user:password@host:3306/db                      MySQL / MariaDB
//	user:password@tcp(host:3306)/db                         MySQL / MariaDB, go-sql-driver form
//	/var/lib/app/app.db   or   file:app.db?_pragma=…        SQLite (WAL and a busy timeout are added)
//
// --table names the message table (default outboxer_messages) and --schema its
// PostgreSQL schema (default: the connection's search_path). Names are letters, digits
// and underscores; anything else is refused before connecting. A SQLite file must exist,
// except for migrate up, so that a typo does not create an empty database.
//
// # Commands
//
//	outboxer migrate [up|down] [--print-sql [--dialect postgres|mysql|sqlite]]
//	outboxer counts  [--outbox NAME]...                  messages by state
//	outboxer pending [--outbox NAME]... [--limit N]      oldest first, with attempts and last error
//	outboxer dead    [--outbox NAME]... [--limit N]
//	outboxer status  [--outbox NAME]... [--check …]      per outbox and partition: backlog, retrying,
//	                                                    scheduled, oldest due age, dead, owners,
//	                                                    unowned partitions, lease expiry, paused
//	outboxer retry   [--outbox NAME] (ID... | --all) [--yes]   dead messages back to pending
//	outboxer discard [--outbox NAME] (ID... | --dead) [--yes]  delete for good
//	outboxer pause   --outbox NAME... [--partitions N]
//	outboxer resume  --outbox NAME...
//	outboxer relay   --config relay.yaml [--check]
//	outboxer ui      [--listen 127.0.0.1:8080] [--basic-auth USER:PASS] [--read-only] [--secure-cookie]
//
// Without --outbox, the read-only commands cover every outbox found in the table (by its
// messages or its partition rows). An outbox that has neither is unknown: the command
// fails. retry and discard work on one outbox: --outbox may be left out when the table
// holds exactly one. Output is a table; --json prints JSON instead.
//
// retry, discard and migrate down ask for confirmation on stdin unless --yes is given;
// when stdin is not a terminal and gives no answer they change nothing. They print
// exactly which message IDs they changed, and which IDs asked for were left alone.
//
// # Exit codes
//
//	0  done
//	1  runtime error: the database is unreachable, the table or the outbox does not
//	   exist, a statement failed, the relay failed
//	2  usage error: bad flags, a malformed DSN, an invalid name or configuration;
//	   nothing was done
//	3  a destructive command was not confirmed; nothing was changed
//	4  status --check found an outbox outside its limits
//
// Errors are one line on stderr.
//
// # Health checks
//
// status reads core's Health: per outbox the backlog, the messages waiting for a retry
// and those scheduled for later, how long the oldest due message has waited (the lag),
// the dead messages, the nodes owning partitions and the partitions nobody owns, and the
// live relay nodes (each with the partitions it holds, its share, when it joined and its
// last heartbeat). With --check it also judges it, for cron jobs and probes: it prints the
// status, then one line per problem on stderr, and exits 4 when there is any.
//
//	outboxer status --check --max-age 5m                  lag over 5 minutes, any dead message,
//	                                                      a partition no relay owns
//	outboxer status --check --max-dead -1 --allow-unowned --max-pending 100000
//	outboxer status --check --fail-paused                 a paused outbox is a problem too
//
// --max-dead defaults to 0 (any dead message is a problem; -1 does not check), and
// --max-age and --max-pending to 0 (not checked). These flags need --check.
//
// # Dashboard
//
// outboxer ui serves the web dashboard of package outboxerui (module ui) over the table
// until interrupted: every outbox's backlog, lag, partitions and owners, its blocked
// groups, filtered message lists and single messages, and retry, discard, pause and
// resume after a confirmation page. It listens on 127.0.0.1:8080 unless --listen says
// otherwise; --basic-auth (or $OUTBOXER_UI_BASIC_AUTH) requires a user and password on
// every request, and --read-only hides the actions and refuses every change with 403.
// Behind a proxy that terminates TLS, --secure-cookie marks the CSRF cookie Secure (the
// dashboard does so by itself when it is served over TLS). Serving on a routable address
// without --basic-auth prints a warning.
//
// # Relay
//
// outboxer relay delivers outboxes as a configuration file says, YAML (.yaml, .yml) or
// TOML (.toml), until SIGINT or SIGTERM; it then finishes the batches in flight,
// releases its partitions and exits 0. Several relays may run on the same table: each
// partition has one owner at a time, and the relays share each outbox's partitions evenly
// (max_partitions caps a relay's share; -1 takes it out of the share-out, to take every
// partition nobody holds).
//
//	database:
//	  dsn: ${OUTBOX_DSN}          # ${VAR} is read from the environment; --dsn overrides
//	  table: outboxer_messages
//	  notify: true                # PostgreSQL: wake on NOTIFY instead of polling
//	lease_duration: 20s
//	shutdown_timeout: 10s
//	max_partitions: 0             # 0: a fair share of each outbox's partitions
//	outboxes:
//	  orders:
//	    ordering: group           # group (default), total or none
//	    partitions: 4
//	    batch_size: 100
//	    poll_interval: 1s
//	    max_attempts: 0           # 0 retries forever
//	    backoff: {min: 1s, max: 60s}
//	    retention: delete         # or how long to keep delivered messages, e.g. 72h
//	    sink:
//	      type: kafka
//	      brokers: ["kafka-1:9092"]
//	      topic: orders
//
// Sink types and their fields:
//
//	kafka   brokers, topic, compression (none|snappy|lz4|zstd|gzip), acks (all|leader)
//	sqs     queue_url, region, endpoint, allow_unordered (AWS credentials as the AWS SDK finds them)
//	amqp    url, topic, mode (queue|fanout), durable (Watermill AMQP, e.g. RabbitMQ)
//	river   queue, kind, priority, max_attempts, schema, url (River in another PostgreSQL
//	        database; without url, River's tables are in the outbox's database and jobs are
//	        inserted in the transaction that removes the rows)
//	stdout  none: one JSON line per message on stdout, to try a pipeline out
//
// outboxer relay --check validates the file, including every engine option, without
// connecting to anything.
//
// # Writing messages without Go
//
// Create the tables with outboxer migrate up (or apply the SQL of
// outboxer migrate up --print-sql with your migration tool). A message is one INSERT in
// the business transaction; the columns left out take the table's defaults:
//
//	-- PostgreSQL
//	INSERT INTO outboxer_messages (outbox, type, group_key, payload, headers)
//	VALUES ('orders', 'order.created', 'order:42', convert_to('{"id":42}', 'UTF8'), '{"source":"php"}');
//	-- MySQL / MariaDB
//	INSERT INTO outboxer_messages (outbox, type, group_key, payload, headers)
//	VALUES ('orders', 'order.created', 'order:42', '{"id":42}', '{"source":"php"}');
//	-- SQLite
//	INSERT INTO outboxer_messages (outbox, type, group_key, payload, headers)
//	VALUES ('orders', 'order.created', 'order:42', CAST('{"id":42}' AS BLOB), '{"source":"php"}');
//
// outbox is required; type is the message type; group_key (empty for none) orders the
// messages of one group; payload is the bytes relayed; headers is a JSON object of
// strings, or NULL. The column part is the partition, 0 by default. With one partition
// leave it out. With several, every writer to a group must put it in the same
// partition: Go publishers use the 32-bit FNV-1a hash of the group key modulo the
// number of partitions, and a non-Go writer sharing groups with them must do the same
// (rows left in partition 0 are delivered, in order, but by one worker). On PostgreSQL
// a relay with notify: true is woken at commit when the transaction also runs
// SELECT pg_notify('outboxer.outboxer_messages', 'orders') (channel outboxer.<schema>.<table>
// with a schema); otherwise it finds the rows at its next poll.
package main
