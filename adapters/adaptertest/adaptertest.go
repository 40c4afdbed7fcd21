package adaptertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// ErrNoSavepoints is what Tx.Savepoint returns for an ORM without nested transactions;
// the savepoint cases are then skipped.
var ErrNoSavepoints = errors.New("adaptertest: the ORM has no savepoints")

// Adapter connects the suite to one ORM adapter.
type Adapter struct {
	// Dialects the ORM runs on. Default: every dialect of dbtest.
	Dialects []core.Dialect
	// Open binds the ORM to db (sharing db.DB where the ORM can). Called once per case;
	// clean up with t.Cleanup.
	Open func(t testing.TB, db *dbtest.DB) ORM
	// Reopen, when set, returns the test database opened through another driver (bun's
	// pgdriver, say); every case then runs on that handle: Setup's instance, its
	// migration and the ORM alike. Close the handle with t.Cleanup.
	Reopen func(t testing.TB, db *dbtest.DB) *dbtest.DB
}

// ORM is an ORM bound to one test database, driven through the adapter under test.
type ORM interface {
	// InTx runs the adapter's run-in-transaction helper; fn gets the ORM transaction with
	// the helper's *core.TxPublisher behind Tx.Publish.
	InTx(ctx context.Context, ob *core.Outboxer, fn func(ctx context.Context, tx Tx) error) error
	// Begin opens a transaction in the ORM's own form; Tx.Publish goes through the
	// adapter's Publish with that transaction.
	Begin(ctx context.Context, ob *core.Outboxer) (OpenTx, error)
	// Publish publishes through the ORM's handle that is not a transaction (the pool).
	Publish(ctx context.Context, ob *core.Outboxer, msg core.Message, opts ...core.PublishOption) (core.Envelope, error)
	// PublishAll publishes through the same handle.
	PublishAll(ctx context.Context, ob *core.Outboxer, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error)
}

// Tx is an ORM transaction (or savepoint) as the suite uses it.
type Tx interface {
	// InsertOrder writes a business row into the orders table through the ORM.
	InsertOrder(ctx context.Context, id int64, note string) error
	// Publish publishes through the adapter, in this transaction.
	Publish(ctx context.Context, msg core.Message, opts ...core.PublishOption) (core.Envelope, error)
	// Savepoint runs fn in the ORM's nested transaction (a savepoint): rolled back to
	// the savepoint when fn returns an error (which Savepoint returns), released otherwise.
	// ErrNoSavepoints when the ORM has none.
	Savepoint(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// OpenTx is a transaction opened by ORM.Begin.
type OpenTx interface {
	Tx
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// OrdersDDL creates the business table the suite writes to: orders(id, note).
func OrdersDDL(d core.Dialect) string {
	if d == core.MySQL {
		return "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(200) NOT NULL) ENGINE=InnoDB"
	}
	return "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(200) NOT NULL)"
}

// Event is the message the suite publishes.
type Event struct {
	OrderID int64             `json:"order_id"`
	Note    string            `json:"note"`
	To      string            `json:"-"`
	Group   string            `json:"-"`
	Own     map[string]string `json:"-"`
}

// Outbox returns e.To, or "orders".
func (e Event) Outbox() string {
	if e.To != "" {
		return e.To
	}
	return "orders"
}

// GroupKey returns e.Group.
func (e Event) GroupKey() string { return e.Group }

// Headers returns e.Own.
func (e Event) Headers() map[string]string { return e.Own }

// MessageType names the event.
func (Event) MessageType() string { return "order.placed" }

// Recorder is a relay remembering what it was handed, in order.
type Recorder struct {
	mu   sync.Mutex
	got  []core.Envelope
	seen chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{seen: make(chan struct{}, 1)} }

// Deliver records the batch.
func (r *Recorder) Deliver(_ context.Context, batch []core.Envelope) error {
	r.mu.Lock()
	r.got = append(r.got, batch...)
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
	return nil
}

// Got returns what was delivered so far.
func (r *Recorder) Got() []core.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// Env is one test's database, instance and relays.
type Env struct {
	DB     *dbtest.DB
	Ob     *core.Outboxer
	Orders *Recorder // relay of outbox "orders"
	Other  *Recorder // relay of outbox "other"
}

// Setup creates the outbox table and the orders table in db and an instance over it,
// in manual mode unless running is set (the instance is then Run until the test ends).
func Setup(t testing.TB, db *dbtest.DB, mutate func(*core.Config)) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := core.Migrate(ctx, db.DB, core.MigrateOptions{Dialect: db.Dialect}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, OrdersDDL(db.Dialect)); err != nil {
		t.Fatalf("create orders: %v", err)
	}
	e := &Env{DB: db, Orders: NewRecorder(), Other: NewRecorder()}
	cfg := core.Config{
		DB: db.DB, Dialect: db.Dialect, Manual: true,
		Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: e.Orders},
			"other":  {Relay: e.Other},
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ob, err := core.New(cfg)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	e.Ob = ob
	return e
}

// Orders returns the IDs in the orders table, ascending.
func (e *Env) OrderIDs(t testing.TB) []int64 {
	t.Helper()
	rows, err := e.DB.QueryContext(context.Background(), "SELECT id FROM orders ORDER BY id")
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// Pending returns the pending messages of an outbox, as stored.
func (e *Env) Pending(t testing.TB, outbox string) []core.Envelope {
	t.Helper()
	envs, err := e.Ob.ListPending(context.Background(), outbox, 1000)
	if err != nil {
		t.Fatalf("list pending: %v", err)
	}
	return envs
}

func orderIDs(t testing.TB, envs []core.Envelope) []int64 {
	t.Helper()
	ids := make([]int64, len(envs))
	for i, e := range envs {
		var ev Event
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatalf("payload of %d: %v", e.ID, err)
		}
		ids[i] = ev.OrderID
	}
	return ids
}

func dialects(a Adapter) []core.Dialect {
	if len(a.Dialects) > 0 {
		return a.Dialects
	}
	return dbtest.Dialects
}

var errBusiness = errors.New("business rule refused the order")

// Run runs every case of the suite against the adapter, on each of its dialects.
func Run(t *testing.T, a Adapter) {
	cases := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB)
	}{
		{"CommitStores", testCommit},
		{"ErrorRollsBack", testError},
		{"PanicRollsBack", testPanic},
		{"OpenTxCommitAndRollback", testOpenTx},
		{"OptionsRoundTrip", testOptions},
		{"RequireTransaction", testRequireTx},
		{"NoTransactionStoresAtOnce", testNoTx},
		{"NoTransactionPublishAllIsAtomic", testNoTxAll},
		{"SavepointRollback", testSavepoint},
		{"CommitWakesRelay", testWake},
	}
	for _, d := range dialects(a) {
		t.Run(string(d), func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					db := dbtest.Open(t, d)
					if a.Reopen != nil {
						db = a.Reopen(t, db)
					}
					c.run(t, ctx, a, db)
				})
			}
		})
	}
}

func testCommit(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	var published []core.Envelope
	err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		for id := int64(1); id <= 3; id++ {
			if err := tx.InsertOrder(ctx, id, fmt.Sprint("order ", id)); err != nil {
				return err
			}
			env, err := tx.Publish(ctx, Event{OrderID: id, Note: "placed", Group: fmt.Sprint("order:", id)})
			if err != nil {
				return err
			}
			published = append(published, env)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if got := e.OrderIDs(t); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("orders after commit: %v, want [1 2 3]", got)
	}
	pending := e.Pending(t, "orders")
	if got := orderIDs(t, pending); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("pending after commit: %v, want order IDs [1 2 3]", got)
	}
	for i, p := range pending {
		if p.ID != published[i].ID || p.Type != "order.placed" || p.GroupKey != fmt.Sprint("order:", i+1) || p.Outbox != "orders" {
			t.Fatalf("stored %+v, published %+v", p, published[i])
		}
	}
	res, err := e.Ob.Drain(ctx, "orders")
	if err != nil || res.Delivered != 3 {
		t.Fatalf("Drain: %+v, %v; want 3 delivered", res, err)
	}
	if got := orderIDs(t, e.Orders.Got()); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("relayed %v, want [1 2 3]", got)
	}
}

func testError(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		if err := tx.InsertOrder(ctx, 7, "refused"); err != nil {
			return err
		}
		if _, err := tx.Publish(ctx, Event{OrderID: 7}); err != nil {
			return err
		}
		return fmt.Errorf("place order 7: %w", errBusiness)
	})
	if !errors.Is(err, errBusiness) {
		t.Fatalf("InTx returned %v, want the function's error", err)
	}
	if got := e.OrderIDs(t); len(got) != 0 {
		t.Fatalf("orders after rollback: %v, want none", got)
	}
	if got := e.Pending(t, "orders"); len(got) != 0 {
		t.Fatalf("%d messages stored after rollback, want none", len(got))
	}
}

func testPanic(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
			if err := tx.InsertOrder(ctx, 8, "panics"); err != nil {
				return err
			}
			if _, err := tx.Publish(ctx, Event{OrderID: 8}); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v, want the panic to go on after the rollback", recovered)
	}
	if got := e.OrderIDs(t); len(got) != 0 {
		t.Fatalf("orders after panic: %v, want none", got)
	}
	if got := e.Pending(t, "orders"); len(got) != 0 {
		t.Fatalf("%d messages stored after panic, want none", len(got))
	}
	// The pool is usable afterwards: no connection was left in a transaction.
	if err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		_, err := tx.Publish(ctx, Event{OrderID: 9})
		return err
	}); err != nil {
		t.Fatalf("InTx after panic: %v", err)
	}
	if got := orderIDs(t, e.Pending(t, "orders")); !slices.Equal(got, []int64{9}) {
		t.Fatalf("pending %v, want [9]", got)
	}
}

func testOpenTx(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	for _, commit := range []bool{false, true} {
		tx, err := orm.Begin(ctx, e.Ob)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		id := int64(1)
		if commit {
			id = 2
		}
		if err := tx.InsertOrder(ctx, id, "open"); err != nil {
			t.Fatalf("insert: %v", err)
		}
		if _, err := tx.Publish(ctx, Event{OrderID: id}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}
	if got := e.OrderIDs(t); !slices.Equal(got, []int64{2}) {
		t.Fatalf("orders %v, want only the committed [2]", got)
	}
	if got := orderIDs(t, e.Pending(t, "orders")); !slices.Equal(got, []int64{2}) {
		t.Fatalf("pending %v, want only the committed [2]", got)
	}
}

func testOptions(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	var delayed, scheduled, plain, moved core.Envelope
	at := time.Now().Add(2 * time.Hour)
	err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		var err error
		own := map[string]string{"source": "shop", "trace": "own"}
		if plain, err = tx.Publish(ctx, Event{OrderID: 1, Group: "mine", Own: own},
			core.WithGroupKey("order:1"), core.WithHeaders(map[string]string{"trace": "t-1", "tenant": "acme"})); err != nil {
			return err
		}
		if moved, err = tx.Publish(ctx, Event{OrderID: 2}, core.WithOutbox("other")); err != nil {
			return err
		}
		if delayed, err = tx.Publish(ctx, Event{OrderID: 3}, core.WithDelay(time.Hour)); err != nil {
			return err
		}
		scheduled, err = tx.Publish(ctx, Event{OrderID: 4}, core.WithAvailableAt(at))
		return err
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	pending := e.Pending(t, "orders")
	if len(pending) != 3 {
		t.Fatalf("%d pending in orders, want 3", len(pending))
	}
	p := pending[0]
	if p.ID != plain.ID || p.GroupKey != "order:1" {
		t.Fatalf("group key %q, want the option's order:1", p.GroupKey)
	}
	want := map[string]string{"source": "shop", "trace": "t-1", "tenant": "acme"}
	if fmt.Sprint(p.Headers) != fmt.Sprint(want) {
		t.Fatalf("headers %v, want %v (the option's merged over the message's)", p.Headers, want)
	}
	others := e.Pending(t, "other")
	if len(others) != 1 || others[0].ID != moved.ID || others[0].Outbox != "other" {
		t.Fatalf("outbox other holds %+v, want the message published WithOutbox", others)
	}
	if d := pending[1].AvailableAt.Sub(pending[1].CreatedAt); pending[1].ID != delayed.ID || d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Fatalf("WithDelay(1h): available %v after creation", d)
	}
	if d := pending[2].AvailableAt.Sub(at); pending[2].ID != scheduled.ID || d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("WithAvailableAt: available at %v, want about %v", pending[2].AvailableAt, at)
	}
	res, err := e.Ob.Drain(ctx, "orders")
	if err != nil || res.Delivered != 1 {
		t.Fatalf("Drain: %+v, %v; want only the undelayed message delivered", res, err)
	}
	if got := e.Orders.Got(); len(got) != 1 || got[0].ID != plain.ID || fmt.Sprint(got[0].Headers) != fmt.Sprint(want) {
		t.Fatalf("relayed %+v", got)
	}
}

func testRequireTx(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, func(c *core.Config) { c.RequireTransaction = true })
	orm := a.Open(t, db)
	_, err := orm.Publish(ctx, e.Ob, Event{OrderID: 1})
	if !errors.Is(err, core.ErrNotInTransaction) {
		t.Fatalf("Publish outside a transaction returned %v, want core.ErrNotInTransaction", err)
	}
	if got := e.Pending(t, "orders"); len(got) != 0 {
		t.Fatalf("%d stored after a refused publish", len(got))
	}
	if err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		_, err := tx.Publish(ctx, Event{OrderID: 2})
		return err
	}); err != nil {
		t.Fatalf("InTx with RequireTransaction: %v", err)
	}
	tx, err := orm.Begin(ctx, e.Ob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Publish(ctx, Event{OrderID: 3}); err != nil {
		t.Fatalf("Publish in an open transaction with RequireTransaction: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := orderIDs(t, e.Pending(t, "orders")); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("pending %v, want [2 3]", got)
	}
}

func testNoTx(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	env, err := orm.Publish(ctx, e.Ob, Event{OrderID: 5}, core.WithGroupKey("order:5"))
	if err != nil {
		t.Fatalf("Publish outside a transaction: %v", err)
	}
	// Visible at once from another connection: it was committed on its own.
	other, err := sql.Open(db.Driver, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var n int
	if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM outboxer_messages WHERE id = "+fmt.Sprint(env.ID)+" AND group_key = 'order:5'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("message %d seen %d times from another connection, want 1", env.ID, n)
	}
}

// testNoTxAll: PublishAll outside a transaction stores all or nothing, also when it takes
// two statements (1,001 messages) and the database refuses a row of the second.
func testNoTxAll(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	refuse := `ALTER TABLE outboxer_messages ADD CONSTRAINT no_poison CHECK (type <> 'poison')`
	if db.Dialect == core.SQLite {
		refuse = `CREATE TRIGGER no_poison BEFORE INSERT ON outboxer_messages WHEN NEW.type = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END`
	}
	if _, err := db.ExecContext(ctx, refuse); err != nil {
		t.Fatal(err)
	}
	msgs := make([]core.Message, 1001)
	for i := range msgs {
		msgs[i] = Event{OrderID: int64(i + 1)}
	}
	msgs[1000] = core.Raw{To: "orders", Type: "poison", Data: []byte(`{}`)}
	if _, err := orm.PublishAll(ctx, e.Ob, msgs); err == nil {
		t.Fatal("PublishAll with a row the database refuses succeeded")
	}
	pending := func() int64 {
		c, err := e.Ob.Counts(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return c.Pending
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d messages stored by a PublishAll that failed, want none", n)
	}
	msgs[1000] = Event{OrderID: 1001}
	envs, err := orm.PublishAll(ctx, e.Ob, msgs)
	if err != nil {
		t.Fatalf("PublishAll of 1,001 messages outside a transaction: %v", err)
	}
	if n := pending(); n != 1001 || len(envs) != 1001 || envs[1000].ID <= envs[0].ID {
		t.Fatalf("%d messages stored and %d envelopes returned, want the 1,001 published in order", n, len(envs))
	}
}

func testSavepoint(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, nil)
	orm := a.Open(t, db)
	err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		if _, err := tx.Publish(ctx, Event{OrderID: 1}); err != nil {
			return err
		}
		err := tx.Savepoint(ctx, func(ctx context.Context, sp Tx) error {
			if err := sp.InsertOrder(ctx, 2, "in savepoint"); err != nil {
				return err
			}
			if _, err := sp.Publish(ctx, Event{OrderID: 2}); err != nil {
				return err
			}
			return errBusiness
		})
		if errors.Is(err, ErrNoSavepoints) {
			return err
		}
		if !errors.Is(err, errBusiness) {
			return fmt.Errorf("savepoint returned %v, want its function's error", err)
		}
		if err := tx.Savepoint(ctx, func(ctx context.Context, sp Tx) error {
			if err := sp.InsertOrder(ctx, 3, "kept savepoint"); err != nil {
				return err
			}
			_, err := sp.Publish(ctx, Event{OrderID: 3})
			return err
		}); err != nil {
			return fmt.Errorf("released savepoint: %w", err)
		}
		_, err = tx.Publish(ctx, Event{OrderID: 4})
		return err
	})
	if errors.Is(err, ErrNoSavepoints) {
		t.Skip("the ORM has no nested transactions")
	}
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if got := e.OrderIDs(t); !slices.Equal(got, []int64{3}) {
		t.Fatalf("orders %v, want [3] (2 was in the rolled-back savepoint)", got)
	}
	if got := orderIDs(t, e.Pending(t, "orders")); !slices.Equal(got, []int64{1, 3, 4}) {
		t.Fatalf("pending %v, want [1 3 4]: the message of the rolled-back savepoint is gone, the others stay", got)
	}
}

func testWake(t *testing.T, ctx context.Context, a Adapter, db *dbtest.DB) {
	e := Setup(t, db, func(c *core.Config) {
		c.Manual = false
		for name, oc := range c.Outboxes {
			oc.PollInterval = time.Hour // only a wake-up can deliver within the test
			c.Outboxes[name] = oc
		}
	})
	orm := a.Open(t, db)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Ob.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Let the worker reach its idle wait: its first poll happens at start.
	waitFor(t, ctx, func() bool {
		st, err := e.Ob.Status(ctx, "orders")
		return err == nil && len(st) == 1 && st[0].LeaseHeld
	})
	var env core.Envelope
	if err := orm.InTx(ctx, e.Ob, func(ctx context.Context, tx Tx) error {
		var err error
		env, err = tx.Publish(ctx, Event{OrderID: 11})
		if err != nil {
			return err
		}
		// Keep the transaction open past the engine's own re-checks after a publish
		// inside a transaction, so that only the wake-up after commit can deliver it.
		select {
		case <-time.After(150 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatalf("InTx: %v", err)
	}
	select {
	case <-e.Orders.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("message %d not delivered within 10s of commit (poll interval 1h): the relay was not woken", env.ID)
	}
	if got := e.Orders.Got(); len(got) != 1 || got[0].ID != env.ID {
		t.Fatalf("relayed %+v, want message %d", got, env.ID)
	}
}

func waitFor(t testing.TB, ctx context.Context, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("condition not met: %v", ctx.Err())
		case <-tick.C:
		}
	}
}
