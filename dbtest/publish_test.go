package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestMigrateIsIdempotentAndReversible(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		opts := core.MigrateOptions{Table: "events_outbox"}
		for range 2 {
			if err := core.Migrate(ctx, db.DB, opts); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
		}
		for _, name := range []string{"events_outbox", "events_outbox_leases"} {
			if !tableExists(t, db, name) {
				t.Errorf("table %s missing after Migrate", name)
			}
		}
		if err := core.MigrateDown(ctx, db.DB, opts); err != nil {
			t.Fatalf("MigrateDown: %v", err)
		}
		if tableExists(t, db, "events_outbox") || tableExists(t, db, "events_outbox_leases") {
			t.Errorf("tables left after MigrateDown")
		}
		// The DDL as text is what Migrate runs: applying it by hand gives a working table.
		up, _, err := core.MigrationSQL(core.MigrateOptions{Dialect: db.Dialect, Table: "events_outbox"})
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range strings.Split(up, ";\n\n") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("applying MigrationSQL: %v\n%s", err, stmt)
			}
		}
		ob := setup(t, db, core.Config{Table: "events_outbox"})
		publish(t, ob, db.DB, event{Seq: 1})
		if c := counts(t, ob, "orders"); c.Pending != 1 {
			t.Errorf("pending = %d, want 1", c.Pending)
		}
	})
}

func TestPublishCommitsWithTheTransaction(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{})
		// Rolled back: nothing stays.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Publish(ctx, tx, event{Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if c := counts(t, ob, "orders"); c.Pending != 0 {
			t.Fatalf("after rollback: pending = %d, want 0", c.Pending)
		}
		// Committed: stored, with what Publish returned.
		tx, _ = db.BeginTx(ctx, nil)
		env, err := ob.Publish(ctx, tx, event{Seq: 2, Group: "order:1", Hdr: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		pending, err := ob.ListPending(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != 1 {
			t.Fatalf("pending = %d messages, want 1", len(pending))
		}
		got := pending[0]
		if got.ID != env.ID || got.Type != "test.Event" || got.GroupKey != "order:1" || string(got.Payload) != `{"seq":2}` ||
			got.Headers["k"] != "v" || got.State != core.Pending || got.Attempts != 0 || got.CreatedAt.IsZero() {
			t.Errorf("stored %+v, published %+v", got, env)
		}
		if !got.CreatedAt.Equal(env.CreatedAt) || !got.AvailableAt.Equal(env.AvailableAt) {
			t.Errorf("times: stored %v/%v, returned %v/%v", got.CreatedAt, got.AvailableAt, env.CreatedAt, env.AvailableAt)
		}
		// On a plain handle the message is stored at once.
		publish(t, ob, db.DB, event{Seq: 3})
		if c := counts(t, ob, "orders"); c.Pending != 2 {
			t.Errorf("pending = %d, want 2", c.Pending)
		}
	})
}

func TestPublishAllIsOneStatementInOrder(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 4}}})
		msgs := make([]core.Message, 100)
		for i := range msgs {
			msgs[i] = event{Seq: i, Group: "g" + string(rune('a'+i%7))}
		}
		// The instance reads the partition count the relays recorded on its first publish
		// (and every 2 s after): the statement counted is the one every other publish runs.
		warm := publish(t, ob, db.DB, event{Seq: -1, Group: "warm-up"})
		if _, err := ob.Discard(ctx, "orders", warm[0].ID); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		exec := &countingExec{Tx: tx}
		envs, err := ob.PublishAll(ctx, exec, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if exec.n != 1 {
			t.Errorf("PublishAll of 100 messages ran %d statements, want 1", exec.n)
		}
		for i, e := range envs {
			if i > 0 && e.ID <= envs[i-1].ID {
				t.Fatalf("IDs not ascending in input order: %d then %d", envs[i-1].ID, e.ID)
			}
			if want := core.PartitionFor(e.GroupKey, 4); e.Partition != want {
				t.Errorf("message %d in partition %d, want %d", i, e.Partition, want)
			}
		}
		stored, err := ob.ListPending(ctx, "orders", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range stored {
			if e.ID != envs[i].ID || string(e.Payload) != string(envs[i].Payload) || e.Partition != envs[i].Partition {
				t.Fatalf("stored[%d] = %+v, want %+v", i, e, envs[i])
			}
		}
		// More than one chunk still works, in order.
		big := make([]core.Message, 2500)
		for i := range big {
			big[i] = event{Seq: i}
		}
		envs = publish(t, ob, db.DB, big...)
		if len(envs) != 2500 || !slices.IsSortedFunc(envs, func(a, b core.Envelope) int { return int(a.ID - b.ID) }) {
			t.Errorf("2,500 messages: %d envelopes, sorted %v", len(envs), slices.IsSortedFunc(envs, func(a, b core.Envelope) int { return int(a.ID - b.ID) }))
		}
	})
}

// PublishAll outside a transaction is atomic on its own even when it takes more than one
// statement (several tables here; more than 1,000 messages likewise): when the second
// INSERT fails, the first is not kept. A handle that can neither be a transaction nor
// begin one is refused before anything is written.
func TestPublishAllOutsideATransactionIsAtomic(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{
			"orders":   {Relay: &recorder{}},
			"invoices": {Relay: &recorder{}, Table: "invoice_outbox"},
		}})
		both := []core.Message{event{Seq: 1}, event{Seq: 2, Box: "invoices"}}

		// A handle without BeginTx: two statements would not be atomic, so nothing runs.
		_, err := ob.PublishAll(ctx, execOnly{db.DB}, both)
		if !errors.Is(err, core.ErrInvalidExecutor) {
			t.Fatalf("PublishAll over two tables on a handle that cannot begin a transaction: %v, want ErrInvalidExecutor", err)
		}
		// One statement needs no transaction.
		if _, err := ob.PublishAll(ctx, execOnly{db.DB}, both[:1]); err != nil {
			t.Fatalf("PublishAll of one message on a handle that cannot begin a transaction: %v", err)
		}
		if c := counts(t, ob, "orders"); c.Pending != 1 {
			t.Fatalf("orders pending %d, want 1", c.Pending)
		}

		// Both tables there: both written.
		if _, err := ob.PublishAll(ctx, db.DB, both); err != nil {
			t.Fatalf("PublishAll over two tables: %v", err)
		}
		if o, i := counts(t, ob, "orders"), counts(t, ob, "invoices"); o.Pending != 2 || i.Pending != 1 {
			t.Fatalf("pending orders %d, invoices %d; want 2 and 1", o.Pending, i.Pending)
		}
		// The second table gone: the second INSERT fails, and the first is not kept.
		if _, err := db.ExecContext(ctx, `DROP TABLE invoice_outbox`); err != nil {
			t.Fatal(err)
		}
		if _, err := ob.PublishAll(ctx, db.DB, both); err == nil {
			t.Fatal("PublishAll into a dropped table succeeded")
		}
		if c := counts(t, ob, "orders"); c.Pending != 2 {
			t.Errorf("orders pending %d after a PublishAll that failed, want 2: its first statement was kept", c.Pending)
		}
	})
}

// execOnly is a handle that runs statements and reads rows but cannot begin a transaction.
type execOnly struct{ db *sql.DB }

func (e execOnly) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return e.db.ExecContext(ctx, q, args...)
}

func (e execOnly) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return e.db.QueryContext(ctx, q, args...)
}

type ownHeaders struct{ event }

func TestPublishOptions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{
			"orders":   {Relay: &recorder{}},
			"invoices": {Relay: &recorder{}, Table: "invoice_outbox"},
		}})
		env, err := ob.Publish(ctx, db.DB, event{Seq: 1, Group: "own", Hdr: map[string]string{"a": "msg", "b": "msg"}},
			core.WithOutbox("invoices"), core.WithGroupKey("invoice:7"),
			core.WithHeaders(map[string]string{"b": "opt", "c": "opt"}), core.WithDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if env.Outbox != "invoices" || env.GroupKey != "invoice:7" {
			t.Errorf("outbox/group = %q/%q", env.Outbox, env.GroupKey)
		}
		if want := map[string]string{"a": "msg", "b": "opt", "c": "opt"}; !mapsEqual(env.Headers, want) {
			t.Errorf("headers = %v, want %v", env.Headers, want)
		}
		if d := env.AvailableAt.Sub(env.CreatedAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
			t.Errorf("available %v after creation, want 1h", d)
		}
		// It went to the invoices table, not the shared one.
		if c := counts(t, ob, "orders"); c.Pending != 0 {
			t.Errorf("orders pending = %d", c.Pending)
		}
		list, err := ob.ListPending(ctx, "invoices", 10)
		if err != nil || len(list) != 1 || !mapsEqual(list[0].Headers, env.Headers) || list[0].GroupKey != "invoice:7" {
			t.Errorf("invoices = %+v, %v", list, err)
		}
		// A group key option of "" makes a grouped message unordered.
		env, err = ob.Publish(ctx, db.DB, event{Seq: 2, Group: "g"}, core.WithGroupKey(""))
		if err != nil || env.GroupKey != "" {
			t.Errorf("WithGroupKey(\"\"): %q, %v", env.GroupKey, err)
		}
		// A scheduled time in the past is now.
		env, err = ob.Publish(ctx, db.DB, event{Seq: 3}, core.WithAvailableAt(time.Now().Add(-time.Hour)))
		if err != nil || env.AvailableAt.Sub(env.CreatedAt) > time.Second {
			t.Errorf("WithAvailableAt in the past: %v, %v", env.AvailableAt.Sub(env.CreatedAt), err)
		}
		// Raw messages are stored as they are.
		env, err = ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "proto.Order", Key: "k", Data: []byte{0, 1, 2, 255}})
		if err != nil || string(env.Payload) != "\x00\x01\x02\xff" || env.Type != "proto.Order" {
			t.Errorf("Raw: %+v, %v", env, err)
		}
		list, _ = ob.ListPending(ctx, "orders", 10)
		if last := list[len(list)-1]; string(last.Payload) != "\x00\x01\x02\xff" {
			t.Errorf("Raw payload stored as %v", last.Payload)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

type unencodable struct {
	C chan int
}

func (unencodable) Outbox() string { return "orders" }

type noOutbox struct{}

func (noOutbox) Outbox() string { return "" }

func TestPublishRefusesBadInputAndWritesNothing(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{MaxPayloadBytes: 64})
		var nilEvent *ownHeaders
		cases := []struct {
			name string
			msgs []core.Message
			opts []core.PublishOption
			want error
		}{
			{"nil", []core.Message{nil}, nil, core.ErrInvalidMessage},
			{"typed nil", []core.Message{nilEvent}, nil, core.ErrInvalidMessage},
			{"unknown outbox", []core.Message{event{Box: "nope"}}, nil, core.ErrUnknownOutbox},
			{"unknown outbox option", []core.Message{event{}}, []core.PublishOption{core.WithOutbox("nope")}, core.ErrUnknownOutbox},
			{"no outbox", []core.Message{noOutbox{}}, nil, core.ErrInvalidMessage},
			{"unencodable", []core.Message{unencodable{}}, nil, core.ErrInvalidMessage},
			{"too large", []core.Message{core.Raw{To: "orders", Type: "x", Data: make([]byte, 65)}}, nil, core.ErrPayloadTooLarge},
			{"group key too long", []core.Message{event{Group: strings.Repeat("g", 256)}}, nil, core.ErrInvalidMessage},
			{"raw without type", []core.Message{core.Raw{To: "orders"}}, nil, core.ErrInvalidMessage},
			// One bad message among good ones: nothing is written.
			{"one bad of three", []core.Message{event{Seq: 1}, nil, event{Seq: 3}}, nil, core.ErrInvalidMessage},
		}
		for _, c := range cases {
			_, err := ob.PublishAll(ctx, db.DB, c.msgs, c.opts...)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			}
		}
		if _, err := ob.Publish(ctx, nil, event{}); !errors.Is(err, core.ErrInvalidExecutor) {
			t.Errorf("nil executor: %v", err)
		}
		if c := counts(t, ob, "orders"); c != (core.Counts{}) {
			t.Errorf("bad input wrote something: %+v", c)
		}
	})
}

func TestRequireTransaction(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{RequireTransaction: true})
		if _, err := ob.Publish(ctx, db.DB, event{}); !errors.Is(err, core.ErrNotInTransaction) {
			t.Errorf("plain handle: err = %v, want ErrNotInTransaction", err)
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := ob.Publish(ctx, conn, event{}); !errors.Is(err, core.ErrNotInTransaction) {
			t.Errorf("*sql.Conn: err = %v, want ErrNotInTransaction", err)
		}
		if err := ob.InTx(ctx, db.DB, func(tx *sql.Tx, p *core.TxPublisher) error {
			_, err := p.Publish(ctx, event{})
			return err
		}); err != nil {
			t.Errorf("in a transaction: %v", err)
		}
		if c := counts(t, ob, "orders"); c.Pending != 1 {
			t.Errorf("pending = %d, want 1", c.Pending)
		}
	})
}

func TestInTxRollsBackOnErrorAndPanic(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{})
		boom := errors.New("boom")
		err := ob.InTx(ctx, db.DB, func(tx *sql.Tx, p *core.TxPublisher) error {
			if _, err := p.Publish(ctx, event{Seq: 1}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("err = %v, want boom", err)
		}
		func() {
			defer func() {
				if r := recover(); r != "kaput" {
					t.Errorf("recovered %v, want the panic to go on", r)
				}
			}()
			_ = ob.InTx(ctx, db.DB, func(tx *sql.Tx, p *core.TxPublisher) error {
				if _, err := p.Publish(ctx, event{Seq: 2}); err != nil {
					return err
				}
				panic("kaput")
			})
		}()
		if c := counts(t, ob, "orders"); c.Pending != 0 {
			t.Errorf("pending = %d after error and panic, want 0", c.Pending)
		}
	})
}

func TestInvalidIdentifiersAreRefusedAndNothingRuns(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE y (id INTEGER)`); err != nil {
			t.Fatal(err)
		}
		evil := `x"; DROP TABLE y;--`
		_, err := core.New(core.Config{DB: db.DB, Table: evil, Outboxes: map[string]core.OutboxConfig{"o": {Relay: &recorder{}}}})
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Table" {
			t.Errorf("New with table %q: %v", evil, err)
		}
		_, err = core.New(core.Config{DB: db.DB, Outboxes: map[string]core.OutboxConfig{"o": {Relay: &recorder{}, Table: "a`b"}}})
		if !errors.As(err, &ce) || !strings.Contains(ce.Field, "Table") {
			t.Errorf("New with outbox table a`b: %v", err)
		}
		if err := core.Migrate(ctx, db.DB, core.MigrateOptions{Table: evil}); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("Migrate with table %q: %v", evil, err)
		}
		if err := core.Migrate(ctx, db.DB, core.MigrateOptions{Schema: `s"; DROP TABLE y;--`}); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("Migrate with an evil schema: %v", err)
		}
		if !tableExists(t, db, "y") {
			t.Fatal("table y was dropped")
		}
	})
}

func TestSerializeWritesQueuesPublishersOfOneGroup(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			db := dbtest.Open(t, d)
			ctx := context.Background()
			ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, SerializeWrites: true}}})
			first, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback()
			if _, err := ob.Publish(ctx, first, event{Group: "order:1", Seq: 1}); err != nil {
				t.Fatal(err)
			}
			// A second transaction on the same group waits for the first: it cannot get
			// through while the first is open.
			second, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Rollback()
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = ob.Publish(short, second, event{Group: "order:1", Seq: 2})
			cancel()
			if err == nil {
				t.Fatal("a second publisher of the same group went through while the first held the lock")
			}
			second.Rollback()
			// Another group is not held up.
			other, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback()
			short, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := ob.Publish(short, other, event{Group: "order:2", Seq: 1}); err != nil {
				t.Fatalf("another group: %v", err)
			}
			if err := other.Commit(); err != nil {
				t.Fatal(err)
			}
			// Once the first commits, the next publisher of the group goes through, after it.
			var wg sync.WaitGroup
			var later core.Envelope
			wg.Go(func() {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				defer tx.Rollback()
				later, err = ob.Publish(ctx, tx, event{Group: "order:1", Seq: 3})
				if err != nil {
					t.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
				}
			})
			if err := first.Commit(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			list, err := ob.ListPending(ctx, "orders", 10)
			if err != nil {
				t.Fatal(err)
			}
			var seqs []int64
			for _, e := range list {
				if e.GroupKey == "order:1" {
					seqs = append(seqs, e.ID)
				}
			}
			if len(seqs) != 2 || seqs[1] != later.ID {
				t.Errorf("order:1 messages %v, want the first then %d", seqs, later.ID)
			}
			// Without a transaction, Publish takes the lock in one of its own.
			if _, err := ob.Publish(ctx, db.DB, event{Group: "order:1", Seq: 4}); err != nil {
				t.Errorf("plain handle with SerializeWrites: %v", err)
			}
		})
	}
}

// Config.Schema (the reference's prefix) puts the tables in a PostgreSQL schema of their
// own, whatever the connection's search path.
func TestPostgresSchema(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx := context.Background()
	schema := db.Schema + "_outbox"
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	rec := &recorder{}
	ob := setup(t, db, core.Config{Schema: schema, Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}}})
	publish(t, ob, db.DB, event{Seq: 1, Group: "a"})
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+schema+`.outboxer_messages`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in %s.outboxer_messages: %d, %v", schema, n, err)
	}
	if tableExists(t, db, "outboxer_messages") {
		t.Error("a table was made in the search path too")
	}
	if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 1 {
		t.Errorf("Drain = %+v, %v", res, err)
	}
}

// A transaction of another pool on the same database works as well as one of the
// instance's own.
func TestPublishThroughAnotherPool(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{})
		other, err := sql.Open(db.Driver, db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		for range 2 {
			tx, err := other.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ob.PublishAll(ctx, tx, []core.Message{event{Seq: 1}, event{Seq: 2}}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			publish(t, ob, db.DB, event{Seq: 3})
		}
		if c := counts(t, ob, "orders"); c.Pending != 6 {
			t.Errorf("pending = %d, want 6", c.Pending)
		}
	})
}

// A savepoint that rolls back drops what was published inside it; the rest of the
// transaction commits. A name that is not an identifier is refused before any SQL runs.
func TestSavepoint(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{})
		boom := errors.New("boom")
		err := ob.InTx(ctx, db.DB, func(tx *sql.Tx, p *core.TxPublisher) error {
			if _, err := p.Publish(ctx, event{Seq: 1}); err != nil {
				return err
			}
			if err := core.Savepoint(ctx, tx, "gift", func() error {
				if _, err := p.Publish(ctx, event{Seq: 2}); err != nil {
					return err
				}
				return boom
			}); !errors.Is(err, boom) {
				t.Errorf("Savepoint = %v, want boom", err)
			}
			if err := core.Savepoint(ctx, tx, "kept", func() error {
				_, err := p.Publish(ctx, event{Seq: 3})
				return err
			}); err != nil {
				return err
			}
			if err := core.Savepoint(ctx, tx, "x; DROP TABLE y", func() error { return nil }); err == nil {
				t.Error("an invalid savepoint name was accepted")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		pending, _ := ob.ListPending(ctx, "orders", 10)
		if len(pending) != 2 || string(pending[0].Payload) != `{"seq":1}` || string(pending[1].Payload) != `{"seq":3}` {
			t.Errorf("pending = %+v, want seq 1 and 3", pending)
		}
	})
}
