package core

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults, as the reference documents them.
const (
	DefaultName            = "outboxer"
	DefaultTable           = "outboxer_messages"
	DefaultPartitions      = 1
	DefaultBatchSize       = 100
	DefaultPollInterval    = time.Second
	DefaultBackoffMin      = time.Second
	DefaultBackoffMax      = 60 * time.Second
	DefaultPruneInterval   = 60 * time.Second
	DefaultLeaseDuration   = 20 * time.Second
	DefaultDeliveryTimeout = 10 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultMaxPayloadBytes = 1 << 20
	DefaultListLimit       = 100

	// MaxBatchSize bounds BatchSize: the IDs of a batch go into one statement.
	MaxBatchSize = 10000

	// AllPartitions as Config.MaxPartitions opts an instance out of balancing.
	AllPartitions = -1
)

// Dialect is the SQL dialect of the database. New detects it from the driver when unset.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres" // PostgreSQL 15+
	SQLite   Dialect = "sqlite"   // SQLite 3.38+ (modernc.org/sqlite or mattn/go-sqlite3), WAL
	MySQL    Dialect = "mysql"    // MariaDB 10.6+ (it needs INSERT … RETURNING)
)

// Ordering says which messages of an outbox keep their relative order.
type Ordering int

const (
	// OrderGroup keeps order among messages with the same group key; messages without a
	// key are unordered. A failing message blocks its own group only. The default.
	OrderGroup Ordering = iota
	// OrderTotal keeps one order for the whole outbox: one partition, and a failing
	// message blocks everything behind it.
	OrderTotal
	// OrderNone keeps no order: group keys are stored and relayed, but nothing blocks.
	OrderNone
)

func (o Ordering) String() string {
	switch o {
	case OrderGroup:
		return "group"
	case OrderTotal:
		return "total"
	case OrderNone:
		return "none"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// Retention says what happens to a delivered message.
type Retention struct{ keep time.Duration }

// Delete removes a message as soon as it is delivered: the smallest table. The default.
var Delete = Retention{}

// KeepFor marks delivered messages Delivered and prunes them d after delivery, every
// Config.PruneInterval.
func KeepFor(d time.Duration) Retention { return Retention{keep: d} }

// Keep reports how long delivered messages are kept; 0 means they are deleted.
func (r Retention) Keep() time.Duration { return r.keep }

// Backoff is the delay before a failed message is retried: exponential from Min to Max
// with full jitter, or Func when set. Zero Min and Max mean 1 s and 60 s.
type Backoff struct {
	Min, Max time.Duration
	// Func, when set, returns the delay after the given number of failed attempts (1, 2, …).
	Func func(attempts int) time.Duration
}

// Delay returns the delay after attempts failed attempts.
func (b Backoff) Delay(attempts int) time.Duration {
	if b.Func != nil {
		return max(b.Func(attempts), 0)
	}
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultBackoffMin
		if hi > 0 {
			lo = min(lo, hi)
		}
	}
	if hi <= 0 {
		hi = max(DefaultBackoffMax, lo)
	}
	hi = max(hi, lo)
	d := hi
	// Attempts below 1 count as 1: a negative shift would panic.
	if shift := max(attempts, 1) - 1; shift < 62 && lo<<shift > 0 && lo<<shift < hi {
		d = lo << shift
	}
	// Jitter: a uniform delay in [d/2, d], never below Min.
	return max(d/2+rand.N(d/2+1), lo)
}

// Hooks receive the engine's telemetry events. Every field is optional; hooks run on the
// goroutine that raised the event, so they must be quick. Package outboxerotel (module
// github.com/outboxer-go/outboxer/otel) turns them into OpenTelemetry metrics and spans.
type Hooks struct {
	OnPublish        func(PublishEvent)
	OnBatchStart     func(BatchEvent)
	OnBatchStop      func(BatchEvent)
	OnBatchException func(BatchEvent)
	OnRetry          func(MessageEvent)
	OnDead           func(MessageEvent)
	OnPrune          func(PruneEvent)

	// OnPublishContext, when set, wraps every Publish and PublishAll call with the
	// caller's context: it is called before the messages are validated and written,
	// with the instance's name, the distinct outboxes named and the message count (the
	// event OnPublish receives after the write), and may return headers and a done func.
	// A tracer uses it to start a span and store the span's context in the messages.
	//
	// The headers are added to every message of the call, under its own: a header the
	// message sets (Headerer) or WithHeaders sets keeps its value, and only the names it
	// does not set are filled in. done, when not nil, is called once after the write
	// (and, on a handle that is not a transaction, its commit) with the stored envelopes
	// and nil, or with nil and the error Publish returns. A publishing transaction may
	// still roll back after done. Unlike the other hooks it runs on every publish, so it
	// must be quick; unset, it costs nothing.
	OnPublishContext func(ctx context.Context, ev PublishEvent) (headers map[string]string, done func(envs []Envelope, err error))

	// OnBatchContext, when set, is called as each batch is handed to its relay, after
	// OnBatchStart, with the worker's context and the batch's event. The context it
	// returns, which must derive from ctx, is the one the relay's Deliver (or DeliverTx)
	// receives, under the delivery deadline; nil keeps ctx. A tracer uses it to make the
	// span of the batch the parent of the relay's spans. It ends with OnBatchStop or
	// OnBatchException.
	OnBatchContext func(ctx context.Context, ev BatchEvent) context.Context
}

// PublishEvent: messages were written (the transaction may still roll back).
type PublishEvent struct {
	Name     string   // instance
	Outboxes []string // distinct outboxes written to
	Count    int
}

// BatchEvent describes one batch handed to a relay.
type BatchEvent struct {
	Name      string
	Outbox    string
	Partition int
	Relay     string // the relay's Go type
	Count     int    // messages handed to the relay
	Fetched   int    // messages read (stop only)
	Delivered int    // stop only
	Failed    int    // stop only: failed and will be retried
	Dead      int    // stop only
	Duration  time.Duration
	Err       error // exception only: the relay's or the database's error
}

// MessageEvent: one message failed; it will be retried (OnRetry) or is now dead (OnDead).
type MessageEvent struct {
	Name      string
	Outbox    string
	Partition int
	ID        int64
	Type      string
	GroupKey  string
	Attempt   int
	Err       error
}

// PruneEvent: delivered messages past their retention were removed.
type PruneEvent struct {
	Name   string
	Outbox string
	Count  int
}

// Config configures an instance. DB and Outboxes are required, and a Relay per outbox
// unless the instance is PublishOnly. New applies the defaults and validates everything.
type Config struct {
	// Name of the instance, for logs and telemetry. Default "outboxer".
	Name string
	// DB holds the outbox table; it must be the database the business writes go to. A
	// relay's workers (one per partition) use connections at once: let the pool keep
	// enough idle (SetMaxIdleConns, at least the partitions plus 4, plus what the rest of
	// the service uses), or statements wait for new connections; Run warns when the pool
	// closes connections as soon as they are given back.
	DB *sql.DB
	// Dialect of DB; detected from the driver when empty.
	Dialect Dialect
	// Table used by every outbox that sets none. Default "outboxer_messages". Letters,
	// digits and _, at most MaxTableLen (53) characters.
	Table string
	// Schema (PostgreSQL) of the tables; the connection's search path when empty.
	Schema string
	// Outboxes by name.
	Outboxes map[string]OutboxConfig

	// Notify (PostgreSQL) wakes the worker owning a partition through LISTEN/NOTIFY when a
	// publishing transaction commits, on whichever node it runs, instead of waiting for the
	// next poll. It needs the pgx driver (github.com/jackc/pgx/v5/stdlib) and uses one
	// extra connection per instance.
	//
	// The relays record in the database whether they listen, and every instance that
	// publishes into the outbox then notifies at commit, whatever its own Notify says:
	// publish-only nodes need not set it (see Partitions for when they read it).
	Notify bool
	// NotifyListener, with Notify, opens the sessions a relay instance listens on, instead
	// of a connection of DB, which needs the pgx driver and a session the server keeps
	// between statements. Set it when DB goes through a pooler in transaction mode
	// (PgBouncer, RDS Proxy, Supavisor, pgcat), or uses a driver other than pgx:
	// pgxoutbox.NewListener(dsn) (module github.com/outboxer-go/outboxer/adapters/pgx)
	// opens them on pgx connections to PostgreSQL itself. Publishing sends its NOTIFY in
	// the publishing transaction, which works through any pooler and driver; publish-only
	// instances do not listen.
	//
	// Each new listening session, of either kind, is checked: a channel of its own must be
	// in pg_listening_channels() on it, and a test notification must reach it. One that fails is
	// logged at Warn (ErrNotifyNotListening), and the workers poll every PollInterval until
	// a later session passes.
	NotifyListener NotifyListener
	// PublishOnly instances deliver nothing: Run starts nothing and the outboxes need no
	// Relay. Use it on nodes that only publish (the reference's relay: false).
	PublishOnly bool
	// Manual mode (for tests) starts no workers: messages are delivered only by Drain.
	Manual bool
	// RequireTransaction makes Publish refuse a handle that is not a transaction.
	RequireTransaction bool
	// PruneInterval between pruning passes for outboxes with KeepFor retention. Default 60 s.
	PruneInterval time.Duration
	// Codec encodes messages into payloads. Default JSON.
	Codec Codec
	// Logger for the engine. Default slog.Default().
	Logger *slog.Logger
	// Hooks receive telemetry events.
	Hooks Hooks
	// LeaseDuration a worker owns its partition without renewing. A crashed node's
	// partitions are taken over at most about LeaseDuration + LeaseDuration/4 later: nodes
	// heartbeat every LeaseDuration/4 (at most every second), are forgotten when they
	// miss heartbeats for LeaseDuration, and read the membership and the free partitions
	// every 250 ms (LeaseDuration/8 when shorter).
	// Default 20 s; at least 1 s.
	LeaseDuration time.Duration
	// MaxPartitions says how many partitions of each outbox this instance holds when
	// several relay nodes share them. Every running instance heartbeats into the
	// database; each aims at its fair share of every outbox's partitions (P/N rounded up
	// for the first P mod N nodes in the order they joined, down for the others), takes
	// free partitions up to it and gives back, after confirming its batch in flight, what
	// it holds beyond it. A node that joins while the others hold every partition stands by.
	//
	// 0 (the default): the fair share. n > 0: at most n; the other nodes share the rest.
	// AllPartitions (-1): this instance is not balanced: it takes every partition that
	// nobody holds and gives none back (a single relay, or a hot standby, as before
	// nodes shared partitions); the balanced nodes share out the partitions among
	// themselves and it delivers only those they leave.
	MaxPartitions int
	// ShutdownTimeout bounds how long Run waits for in-flight batches after ctx is done.
	// Default 10 s.
	ShutdownTimeout time.Duration
	// MaxPayloadBytes refuses larger encoded messages at Publish. Default 1 MiB.
	MaxPayloadBytes int
	// VacuumInterval (PostgreSQL) between VACUUMs of the message tables by Run. Delivered
	// messages are deleted, and their space comes back only through vacuum. 0 (the default)
	// vacuums every 30 s only when the server's autovacuum is off, and leaves it to
	// autovacuum otherwise. Whatever the interval (but a negative one), Run also vacuums a
	// table once its workers set 1,000 or more rows aside behind a waiting message of
	// their group: each left an entry in the index of ready rows that every fetch steps
	// over until a vacuum. A negative value never vacuums. Vacuuming needs the table's
	// owner (or the MAINTAIN privilege); without it PostgreSQL skips the table with a
	// warning and autovacuum does the work later.
	VacuumInterval time.Duration
	// AllowRepartition lets Run change an outbox's partition count (or its ordering) on a
	// live backlog, or while relays with the old count still hold partitions (a rolling
	// deploy). Pending messages are then moved to their group's partition among the new
	// count, and order across the change is not guaranteed. Without it, Run changes the
	// count only when no relay holds a partition of the outbox and nothing is pending, and
	// is refused with ErrRepartitioned otherwise.
	AllowRepartition bool
}

// OutboxConfig configures one outbox.
type OutboxConfig struct {
	// Relay delivers the outbox's messages. Required unless the instance is PublishOnly.
	Relay Relay
	// Table holding the outbox's messages; Config.Table when empty.
	Table string
	// Ordering of the outbox. Default OrderGroup. Like Partitions, it is recorded in the
	// database by the relays and publishers place messages by the recorded one; a Run with
	// another is refused with ErrShapeMismatch while relays with the recorded one hold
	// partitions or messages are pending (unless AllowRepartition is set).
	Ordering Ordering
	// Partitions: how many workers deliver concurrently; a group always lands in the same
	// partition. Default 1; OrderTotal needs 1.
	//
	// The count is recorded in the database by the relays (their lease rows), and it is
	// the one every node uses: a publish places messages among the recorded count, read
	// on the instance's first publish to the outbox and again every few seconds, whatever
	// this field says (it counts only until a relay has run). A Run with another count
	// changes the record only when no relay holds a partition and nothing is pending
	// (see AllowRepartition); it then waits a few seconds for publishers to read it.
	Partitions int
	// BatchSize: most messages fetched and handed to the relay at once. Default 100.
	BatchSize int
	// PollInterval an idle worker waits before looking again. Default 1 s. It may be longer
	// than Config.LeaseDuration: an idle worker renews its lease while it waits.
	PollInterval time.Duration
	// MaxAttempts before a message is dead. 0 (the default) retries forever, which keeps
	// order and blocks the group until the message is delivered or discarded.
	MaxAttempts int
	// Backoff between attempts. Default exponential from 1 s to 60 s with jitter.
	Backoff Backoff
	// Retention of delivered messages. Default Delete.
	Retention Retention
	// SerializeWrites takes a lock on the group key when publishing, so concurrent
	// transactions writing to one group commit in ID order. PostgreSQL and MariaDB; a no-op
	// on SQLite, which has a single writer.
	SerializeWrites bool
	// DeliveryTimeout bounds one call to the relay. Default 10 s, or half of
	// Config.LeaseDuration when that is shorter; at most half of Config.LeaseDuration. It is also cut short when the worker's lease could run out.
	DeliveryTimeout time.Duration
	// Paused starts the outbox paused on every node, as Pause does.
	Paused bool
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// validIdent reports whether s may name a table or schema: letters, digits and
// underscores, not starting with a digit, at most 63 characters. Names are also quoted.
func validIdent(s string) bool { return identRE.MatchString(s) }

// MaxTableLen bounds table names: the names derived from a table (its "_leases" and
// "_locks" tables, its "_delivered" index) must fit PostgreSQL's 63 bytes, which would
// otherwise cut them silently, possibly onto the table's own name.
const MaxTableLen = 63 - len("_delivered")

// validTable reports whether s may name a message table: a valid identifier of at most
// MaxTableLen characters.
func validTable(s string) bool { return len(s) <= MaxTableLen && validIdent(s) }

// tableReason says what a valid table name is.
func tableReason(s string) string {
	return fmt.Sprintf("%q is not a valid table name (letters, digits, _; at most %d)", s, MaxTableLen)
}

func (c *Config) withDefaults() Config {
	cfg := *c
	cfg.Name = orDefault(cfg.Name, DefaultName)
	cfg.Table = orDefault(cfg.Table, DefaultTable)
	cfg.PruneInterval = orDefault(cfg.PruneInterval, DefaultPruneInterval)
	cfg.LeaseDuration = orDefault(cfg.LeaseDuration, DefaultLeaseDuration)
	cfg.ShutdownTimeout = orDefault(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	cfg.MaxPayloadBytes = orDefault(cfg.MaxPayloadBytes, DefaultMaxPayloadBytes)
	if cfg.Codec == nil {
		cfg.Codec = JSON{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	outboxes := make(map[string]OutboxConfig, len(cfg.Outboxes))
	for name, ob := range cfg.Outboxes {
		ob.Table = orDefault(ob.Table, cfg.Table)
		ob.Partitions = orDefault(ob.Partitions, DefaultPartitions)
		ob.BatchSize = orDefault(ob.BatchSize, DefaultBatchSize)
		ob.PollInterval = orDefault(ob.PollInterval, DefaultPollInterval)
		ob.DeliveryTimeout = orDefault(ob.DeliveryTimeout, min(DefaultDeliveryTimeout, cfg.LeaseDuration/2))
		if ob.Backoff.Func == nil {
			if ob.Backoff.Min == 0 && ob.Backoff.Max > 0 {
				// Only Max given: the default Min, unless Max is below it.
				ob.Backoff.Min = min(DefaultBackoffMin, ob.Backoff.Max)
			}
			ob.Backoff.Min = orDefault(ob.Backoff.Min, DefaultBackoffMin)
			ob.Backoff.Max = orDefault(ob.Backoff.Max, max(DefaultBackoffMax, ob.Backoff.Min))
		}
		outboxes[name] = ob
	}
	cfg.Outboxes = outboxes
	return cfg
}

// storableText reports whether s can go into a text column of every dialect unchanged:
// valid UTF-8 without NUL bytes (PostgreSQL refuses both, MariaDB invalid UTF-8).
func storableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// validate checks a configuration with defaults applied.
func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.DB == nil {
		return bad("DB", "is required")
	}
	switch c.Dialect {
	case Postgres, SQLite, MySQL:
	default:
		return bad("Dialect", "%q is not one of postgres, sqlite, mysql", c.Dialect)
	}
	if !validTable(c.Table) {
		return bad("Table", "%s", tableReason(c.Table))
	}
	if c.Schema != "" {
		if c.Dialect != Postgres {
			return bad("Schema", "is for PostgreSQL only (the dialect is %s)", c.Dialect)
		}
		if !validIdent(c.Schema) {
			return bad("Schema", "%q is not a valid name (letters, digits, _; at most 63)", c.Schema)
		}
	}
	if c.Notify && c.Dialect != Postgres {
		return bad("Notify", "needs PostgreSQL (the dialect is %s)", c.Dialect)
	}
	if c.NotifyListener != nil && !c.Notify {
		return bad("NotifyListener", "is used only with Notify: set Notify too")
	}
	if c.PublishOnly && c.Manual {
		return bad("Manual", "cannot be combined with PublishOnly (Drain needs relays)")
	}
	if c.PruneInterval < 0 {
		return bad("PruneInterval", "must be positive, got %v", c.PruneInterval)
	}
	if c.LeaseDuration < time.Second {
		return bad("LeaseDuration", "must be at least 1s, got %v", c.LeaseDuration)
	}
	if c.MaxPartitions < AllPartitions {
		return bad("MaxPartitions", "must be 0 (fair share), a positive cap or AllPartitions (-1), got %d", c.MaxPartitions)
	}
	if c.ShutdownTimeout < 0 {
		return bad("ShutdownTimeout", "must be positive, got %v", c.ShutdownTimeout)
	}
	if c.MaxPayloadBytes < 0 {
		return bad("MaxPayloadBytes", "must be positive, got %d", c.MaxPayloadBytes)
	}
	if len(c.Outboxes) == 0 {
		return bad("Outboxes", "at least one outbox is required")
	}
	for name, ob := range c.Outboxes {
		field := func(f string) string { return fmt.Sprintf("Outboxes[%q].%s", name, f) }
		if name == "" || len(name) > 200 {
			return bad("Outboxes", "outbox names must be 1 to 200 bytes, got %q", name)
		}
		if !storableText(name) {
			return bad("Outboxes", "outbox name %q is not UTF-8 text without NUL bytes", name)
		}
		if ob.Relay == nil && !c.PublishOnly {
			return bad(field("Relay"), "is required unless PublishOnly is set")
		}
		if !validTable(ob.Table) {
			return bad(field("Table"), "%s", tableReason(ob.Table))
		}
		switch ob.Ordering {
		case OrderGroup, OrderNone:
		case OrderTotal:
			if ob.Partitions != 1 {
				return bad(field("Partitions"), "must be 1 with OrderTotal, got %d", ob.Partitions)
			}
		default:
			return bad(field("Ordering"), "unknown ordering %d", int(ob.Ordering))
		}
		if ob.Partitions < 1 || ob.Partitions > 1024 {
			return bad(field("Partitions"), "must be 1 to 1024, got %d", ob.Partitions)
		}
		if ob.BatchSize < 1 || ob.BatchSize > MaxBatchSize {
			return bad(field("BatchSize"), "must be 1 to %d, got %d", MaxBatchSize, ob.BatchSize)
		}
		if ob.PollInterval < time.Millisecond {
			return bad(field("PollInterval"), "must be at least 1ms, got %v", ob.PollInterval)
		}
		if ob.MaxAttempts < 0 {
			return bad(field("MaxAttempts"), "must be 0 (retry forever) or positive, got %d", ob.MaxAttempts)
		}
		if ob.Backoff.Func == nil {
			if ob.Backoff.Min < 0 || ob.Backoff.Max < ob.Backoff.Min {
				return bad(field("Backoff"), "needs 0 <= Min <= Max, got Min %v, Max %v", ob.Backoff.Min, ob.Backoff.Max)
			}
		}
		if ob.Retention.keep < 0 {
			return bad(field("Retention"), "KeepFor needs a positive duration, got %v", ob.Retention.keep)
		}
		if ob.DeliveryTimeout < 0 {
			return bad(field("DeliveryTimeout"), "must be positive, got %v", ob.DeliveryTimeout)
		}
		if ob.DeliveryTimeout > c.LeaseDuration/2 && !c.PublishOnly {
			// A delivery is cut short when the lease could run out, so a longer timeout
			// would only mislead.
			return bad(field("DeliveryTimeout"), "%v must be at most half of LeaseDuration (%v)", ob.DeliveryTimeout, c.LeaseDuration)
		}
	}
	return nil
}
