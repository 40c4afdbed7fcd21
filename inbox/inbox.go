package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/sqlerr"
)

// Defaults.
const (
	// DefaultTable is the table of inbox records; its group marks are in DefaultTable+"_groups".
	DefaultTable = "outboxer_inbox"
	// DefaultWindow is how long a record is kept: the dedup window.
	DefaultWindow = 7 * 24 * time.Hour
	// DefaultPruneInterval is how often Run prunes.
	DefaultPruneInterval = time.Minute
)

// Limits on what Claim records (bytes).
const (
	MaxConsumerLen = 255
	MaxKeyLen      = 255
	MaxGroupLen    = 512
)

// Errors. Both are matched with errors.Is.
var (
	// ErrWindowTooShort: the dedup window is shorter than how late a message can be
	// delivered again, so a redelivery could find its record pruned and run twice.
	// A *WindowError wraps it and core.ErrInvalidConfig.
	ErrWindowTooShort = errors.New("inbox: dedup window shorter than a redelivery bound")
	// ErrInvalidMessage: Claim was given an empty or oversized consumer name, key or group.
	ErrInvalidMessage = errors.New("inbox: invalid message")
	// ErrNoKey: a consumer helper received a message that carries no key
	// (core.HeaderKey): it was not sent by an outboxer sink, or by one too old to add it.
	// The helper hands such a message to its ForeignPolicy.
	ErrNoKey = errors.New("inbox: message carries no " + core.HeaderKey)
)

// WindowError says which redelivery bound the window does not cover.
type WindowError struct {
	Window time.Duration // the inbox's Config.Window
	Bound  time.Duration // the longest redelivery delay of Source
	Source string        // what redelivers that late, e.g. "SQS visibility timeout × max receives"
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("inbox: the dedup window %v is shorter than %s (%v): a redelivery could come after its record was pruned", e.Window, e.Source, e.Bound)
}

// Is matches ErrWindowTooShort and core.ErrInvalidConfig.
func (e *WindowError) Is(target error) bool {
	return target == ErrWindowTooShort || target == core.ErrInvalidConfig
}

// Config configures an Inbox. DB is required; the rest has defaults.
type Config struct {
	// DB is the consumer's database: Handle begins its transactions on it, Prune and Run
	// delete through it. Claim writes through whatever executor it is given.
	DB *sql.DB
	// Dialect of DB; detected from its driver when empty.
	Dialect core.Dialect
	// Table holds the records (Table+"_groups" the group marks); DefaultTable when empty.
	Table string
	// Schema (PostgreSQL only) holds the tables; the search path when empty.
	Schema string
	// Window is the dedup window: a record is pruned once it is older than Window, and a
	// message delivered again after that runs again. DefaultWindow when 0.
	Window time.Duration
	// RedeliveryBound is the longest delay you know of between a message's first
	// delivery and a redelivery (the relay's and the broker's); New refuses a Window
	// shorter than it.
	RedeliveryBound time.Duration
	// StaleCheck turns on the per-group high-water mark: Claim reports a message of a
	// group whose Seq is not above the highest Seq already claimed in it as Stale.
	StaleCheck bool
	// PruneInterval is how often Run prunes; DefaultPruneInterval when 0.
	PruneInterval time.Duration
	// Logger receives the pruner's errors; slog.Default() when nil.
	Logger *slog.Logger
}

// Message is what the inbox needs to know of a received message.
type Message struct {
	// Key is the message's deduplication key: core.HeaderKey on the wire.
	Key string
	// Group and Seq are for the stale check (Config.StaleCheck): the message's ordering
	// group (for outbox messages: the outbox and its group key, see GroupOf) and its
	// position in it (the outbox ID). A message with an empty Group is not checked.
	Group string
	Seq   int64
}

// GroupOf is the Message.Group of an outbox message: its outbox and group key, joined
// by a '/'. It is "" (no stale check) for an unordered message. A '%' or '/' in the
// outbox name is escaped (%25, %2F), so that two pairs never give one group (outbox
// "orders/eu" with key "x", outbox "orders" with key "eu/x"); other names are as they
// are. (An outbox name of many such characters can make a group longer than
// MaxGroupLen, which Claim refuses.)
func GroupOf(outbox, groupKey string) string {
	if groupKey == "" {
		return ""
	}
	if strings.ContainsAny(outbox, "%/") {
		outbox = strings.ReplaceAll(strings.ReplaceAll(outbox, "%", "%25"), "/", "%2F")
	}
	return outbox + "/" + groupKey
}

// Outcome is what Claim found.
type Outcome int

const (
	// Claimed: the message was not seen before (within the window); its record is
	// written in the transaction, and the handler runs.
	Claimed Outcome = iota + 1
	// Duplicate: a committed record of the key exists; the handler must not run.
	Duplicate
	// Stale: the key is new, but a later message of its group was claimed before (the
	// stale check). The record is written; the consumer decides (skip, process,
	// dead-letter) in the same transaction.
	Stale
	// Foreign: the message carries no key (ErrNoKey), and the consumer helper's
	// ForeignPolicy let it pass: the handler did not run, nothing was recorded, and the
	// helper acknowledged the message. Claim and Handle never return it.
	Foreign
)

func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case Foreign:
		return "foreign"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Inbox records received messages in the consumer's transactions. It is safe for
// concurrent use.
type Inbox struct {
	cfg Config
	sql *statements
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// MaxTableLen is the longest Table: its index names add a suffix to it.
const MaxTableLen = 63 - len("_groups_updated_at")

func (c Config) withDefaults() (Config, error) {
	if c.DB == nil {
		return c, &core.ConfigError{Field: "inbox.Config.DB", Reason: "is nil"}
	}
	if c.Dialect == "" {
		d, err := core.DetectDialect(c.DB)
		if err != nil {
			return c, &core.ConfigError{Field: "inbox.Config.Dialect", Reason: err.Error()}
		}
		c.Dialect = d
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = DefaultPruneInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, validate(c.Dialect, c.Schema, c.Table)
}

func validate(d core.Dialect, schema, table string) error {
	switch d {
	case core.Postgres, core.SQLite, core.MySQL:
	default:
		return &core.ConfigError{Field: "inbox.Config.Dialect", Reason: fmt.Sprintf("%q is not one of postgres, sqlite, mysql", d)}
	}
	if !identRE.MatchString(table) || len(table) > MaxTableLen {
		return &core.ConfigError{Field: "inbox.Config.Table", Reason: fmt.Sprintf("%q is not a valid name (letters, digits, _; at most %d)", table, MaxTableLen)}
	}
	if schema != "" {
		if d != core.Postgres {
			return &core.ConfigError{Field: "inbox.Config.Schema", Reason: "is for PostgreSQL only"}
		}
		if !identRE.MatchString(schema) {
			return &core.ConfigError{Field: "inbox.Config.Schema", Reason: fmt.Sprintf("%q is not a valid name (letters, digits, _; at most 63)", schema)}
		}
	}
	return nil
}

// New validates cfg and returns an Inbox. It refuses (a *WindowError) a Window shorter
// than cfg.RedeliveryBound.
func New(cfg Config) (*Inbox, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Window < 0:
		return nil, &core.ConfigError{Field: "inbox.Config.Window", Reason: fmt.Sprintf("is %v; it must be 0 (default %v) or more", cfg.Window, DefaultWindow)}
	case cfg.PruneInterval < 0:
		return nil, &core.ConfigError{Field: "inbox.Config.PruneInterval", Reason: fmt.Sprintf("is %v; it must be 0 (default %v) or more", cfg.PruneInterval, DefaultPruneInterval)}
	case cfg.RedeliveryBound < 0:
		return nil, &core.ConfigError{Field: "inbox.Config.RedeliveryBound", Reason: fmt.Sprintf("is %v; it must be 0 (unknown) or more", cfg.RedeliveryBound)}
	}
	in := &Inbox{cfg: cfg, sql: newStatements(cfg.Dialect, cfg.Schema, cfg.Table)}
	if err := in.CheckRedelivery("Config.RedeliveryBound", cfg.RedeliveryBound); err != nil {
		return nil, err
	}
	return in, nil
}

// Window returns the dedup window.
func (in *Inbox) Window() time.Duration { return in.cfg.Window }

// Dialect returns the inbox's dialect.
func (in *Inbox) Dialect() core.Dialect { return in.cfg.Dialect }

// CheckRedelivery returns a *WindowError when a message can be delivered again as late
// as bound after its first delivery (source says by what) and the window is shorter.
// Call it at start-up for every bound your broker and relay give.
func (in *Inbox) CheckRedelivery(source string, bound time.Duration) error {
	if bound > in.cfg.Window {
		return &WindowError{Window: in.cfg.Window, Bound: bound, Source: source}
	}
	return nil
}

// Claim records that consumer received m, through exec: the consumer's transaction,
// before the handler's writes. It reports Duplicate when a committed record of (consumer,
// m.Key) exists: the handler must not run, and the transaction has nothing to commit.
// Otherwise the record commits or rolls back with the handler's writes.
//
// When another transaction holds an uncommitted record of the same key, Claim waits
// for it: Duplicate if it commits, Claimed (or Stale) if it rolls back. So of two consumers
// racing on a key, exactly one runs its handler to a commit. On SQLite writers are
// serialised: the second consumer's transaction waits for the first's as a whole.
//
// exec must be a transaction: in autocommit the record would be permanent before the
// handler ran, and a handler that then failed would leave the message recorded but
// never handled (its redelivery a Duplicate). Claim refuses, with an error matching
// core.ErrInvalidExecutor, a nil executor, a *sql.DB, a *sql.Conn and a
// core.Transactional that reports it is not in a transaction; for other executors it
// cannot tell, and it is the caller's part.
func (in *Inbox) Claim(ctx context.Context, exec core.Executor, consumer string, m Message) (Outcome, error) {
	if err := checkText("consumer", consumer, MaxConsumerLen, false); err != nil {
		return 0, err
	}
	if err := checkText("key", m.Key, MaxKeyLen, false); err != nil {
		return 0, err
	}
	if err := checkTx(exec); err != nil {
		return 0, err
	}
	check := in.cfg.StaleCheck && m.Group != ""
	if check {
		if err := checkText("group", m.Group, MaxGroupLen, false); err != nil {
			return 0, err
		}
	}
	if n, err := execCount(ctx, exec, in.sql.claim, consumer, m.Key); err != nil {
		return 0, fmt.Errorf("inbox: claim %q for %q: %w", m.Key, consumer, err)
	} else if n == 0 {
		return Duplicate, nil
	}
	if !check {
		return Claimed, nil
	}
	// The group's mark: a new group gets the message's Seq, an existing one is raised
	// to it when it is lower; neither means a later message of the group came first.
	// Unless the pruner deleted the mark (not raised within the window) between the two
	// statements: on PostgreSQL the insert's conflict check takes no lock, so the raise
	// can find no row. The second round inserts the mark then; a mark inserted since
	// by another consumer is new, so the pruner cannot take it again.
	for round := 0; ; round++ {
		if n, err := execCount(ctx, exec, in.sql.claimGroup, consumer, m.Group, m.Seq); err != nil {
			return 0, fmt.Errorf("inbox: group mark of %q for %q: %w", m.Group, consumer, err)
		} else if n == 1 {
			return Claimed, nil
		}
		if n, err := execCount(ctx, exec, in.sql.raiseGroup, m.Seq, consumer, m.Group, m.Seq); err != nil {
			return 0, fmt.Errorf("inbox: group mark of %q for %q: %w", m.Group, consumer, err)
		} else if n == 1 {
			return Claimed, nil
		}
		if round == 1 {
			return Stale, nil
		}
	}
}

// execCount runs q and returns how many rows it changed.
func execCount(ctx context.Context, exec core.Executor, q string, args ...any) (int64, error) {
	res, err := exec.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// checkTx refuses the executors known not to be transactions.
func checkTx(exec core.Executor) error {
	inTx := true
	switch e := exec.(type) {
	case nil, *sql.DB, *sql.Conn:
		inTx = false
	case core.Transactional:
		inTx = e.InTransaction()
	}
	if !inTx {
		return fmt.Errorf("%w: inbox: Claim needs the consumer's transaction, got %T", core.ErrInvalidExecutor, exec)
	}
	return nil
}

func checkText(what, s string, maxLen int, empty bool) error {
	switch {
	case s == "" && !empty:
		return fmt.Errorf("%w: empty %s", ErrInvalidMessage, what)
	case len(s) > maxLen:
		return fmt.Errorf("%w: %s of %d bytes (at most %d)", ErrInvalidMessage, what, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidMessage, what)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("%w: %s holds a NUL byte", ErrInvalidMessage, what)
		}
	}
	return nil
}

// Handler does a message's work in the consumer's transaction tx. o is Claimed or Stale
// (never Duplicate: a duplicate is not handed to it). Returning an error rolls back the
// work and the inbox record, so a redelivery runs it again.
type Handler func(ctx context.Context, tx *sql.Tx, o Outcome) error

// Handle runs h for m in a new transaction on Config.DB, after Claim: it returns
// Duplicate without calling h for a duplicate, h's error (wrapped) after rolling back,
// or the outcome after a commit. Only then may the consumer acknowledge the message to
// its broker.
//
// A transaction that fails with a serialization failure or a deadlock (SQLSTATE 40001
// or 40P01: two MariaDB consumers waiting on a key whose first claimer rolled back, a
// prune running beside the claims, a PostgreSQL consumer at REPEATABLE READ) is rolled
// back and run again, up to HandleAttempts times in all, so such a race never stops a
// consumer: the run after it finds the winner's record (Duplicate) or claims the
// message. h may therefore be called more than once for m, each time in a new
// transaction whose earlier writes were rolled back; keep effects outside the database
// out of it, as for any handler whose transaction can fail.
func (in *Inbox) Handle(ctx context.Context, consumer string, m Message, h Handler) (Outcome, error) {
	for attempt := 1; ; attempt++ {
		o, err := in.handleOnce(ctx, consumer, m, h)
		if err == nil || attempt >= HandleAttempts || !retryable(err) {
			return o, err
		}
		// A short pause, longer each time, lets the winner of the race commit first.
		t := time.NewTimer(time.Duration(attempt*attempt) * 5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
	}
}

// HandleAttempts is how many times Handle runs a message's transaction that keeps
// failing with a serialization failure or a deadlock before it returns the error.
const HandleAttempts = 5

func (in *Inbox) handleOnce(ctx context.Context, consumer string, m Message, h Handler) (Outcome, error) {
	tx, err := in.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inbox: begin: %w", err)
	}
	defer tx.Rollback()
	o, err := in.Claim(ctx, tx, consumer, m)
	if err != nil {
		return 0, err
	}
	if o == Duplicate {
		return Duplicate, tx.Rollback()
	}
	if err := h(ctx, tx, o); err != nil {
		return 0, fmt.Errorf("inbox: handler for %q: %w", m.Key, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("inbox: commit %q: %w", m.Key, err)
	}
	return o, nil
}

// retryable reports whether err is a serialization failure or a deadlock, read from
// the driver's error without importing a driver (internal/sqlerr): pgx, lib/pq, bun's
// pgdriver, go-sql-driver/mysql (whose deadlock 1213 carries SQLSTATE 40001).
func retryable(err error) bool { return sqlerr.Retryable(err) }

// Prune deletes the records older than the window and the group marks not raised
// within it, and returns how many records it deleted.
func (in *Inbox) Prune(ctx context.Context) (int64, error) {
	w := in.cfg.Window.Microseconds()
	n, err := execCount(ctx, in.cfg.DB, in.sql.pruneRecords, w)
	if err != nil {
		return 0, fmt.Errorf("inbox: prune: %w", err)
	}
	if _, err := in.cfg.DB.ExecContext(ctx, in.sql.pruneGroups, w); err != nil {
		return n, fmt.Errorf("inbox: prune groups: %w", err)
	}
	return n, nil
}

// Run prunes every Config.PruneInterval until ctx ends, then returns nil. A failed
// prune is logged and tried again at the next tick.
func (in *Inbox) Run(ctx context.Context) error {
	t := time.NewTicker(in.cfg.PruneInterval)
	defer t.Stop()
	for {
		if _, err := in.Prune(ctx); err != nil && ctx.Err() == nil {
			in.cfg.Logger.Error("inbox: prune failed", "table", in.cfg.Table, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
