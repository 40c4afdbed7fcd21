package entoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"ariga.io/atlas/sql/migrate"
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	entoutbox "github.com/outboxer-go/outboxer/adapters/ent"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	entdb "github.com/outboxer-go/outboxer/examples/ent/ent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(db *dbtest.DB) *entdb.Client {
	d := map[core.Dialect]string{core.Postgres: dialect.Postgres, core.MySQL: dialect.MySQL, core.SQLite: dialect.SQLite}[db.Dialect]
	return entdb.NewClient(entdb.Driver(entsql.OpenDB(d, db.DB)))
}

var adapter = adaptertest.Adapter{Open: func(t testing.TB, db *dbtest.DB) adaptertest.ORM { return orm{open(db)} }}

func TestConformance(t *testing.T) { adaptertest.Run(t, adapter) }

func BenchmarkPublish(b *testing.B) { adaptertest.Bench(b, adapter) }

type orm struct{ client *entdb.Client }

func (o orm) InTx(ctx context.Context, ob *core.Outboxer, fn func(context.Context, adaptertest.Tx) error) error {
	return entoutbox.InTx(ctx, ob, o.client.Tx, func(ctx context.Context, tx *entdb.Tx, p *core.TxPublisher) error {
		return fn(ctx, txn{tx: tx, ob: ob, publish: p.Publish})
	})
}

func (o orm) Begin(ctx context.Context, ob *core.Outboxer) (adaptertest.OpenTx, error) {
	tx, err := o.client.Tx(ctx)
	if err != nil {
		return nil, err
	}
	return txn{tx: tx, ob: ob}, nil
}

func (o orm) Publish(ctx context.Context, ob *core.Outboxer, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return entoutbox.Publish(ctx, ob, o.client, m, opts...)
}

func (o orm) PublishAll(ctx context.Context, ob *core.Outboxer, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	return entoutbox.PublishAll(ctx, ob, o.client, msgs, opts...)
}

type txn struct {
	tx      *entdb.Tx
	ob      *core.Outboxer
	publish func(context.Context, core.Message, ...core.PublishOption) (core.Envelope, error) // nil: entoutbox.Publish
}

func (t txn) InsertOrder(ctx context.Context, id int64, note string) error {
	return t.tx.Order.Create().SetID(id).SetNote(note).Exec(ctx)
}

func (t txn) Publish(ctx context.Context, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if t.publish != nil {
		return t.publish(ctx, m, opts...)
	}
	return entoutbox.Publish(ctx, t.ob, t.tx, m, opts...)
}

// Savepoint: ent has no nested transactions; explicit SAVEPOINT statements through the Tx.
func (t txn) Savepoint(ctx context.Context, fn func(context.Context, adaptertest.Tx) error) error {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return entoutbox.Savepoint(ctx, t.tx, "sp_"+hex.EncodeToString(b), func() error { return fn(ctx, t) })
}

func (t txn) Commit(context.Context) error   { return t.tx.Commit() }
func (t txn) Rollback(context.Context) error { return t.tx.Rollback() }

// placed derives one event from each created order.
func placed(_ context.Context, m ent.Mutation, v ent.Value) ([]core.Message, error) {
	o, ok := v.(*entdb.Order)
	if !ok || !m.Op().Is(ent.OpCreate) {
		return nil, nil
	}
	return []core.Message{adaptertest.Event{OrderID: o.ID, Note: o.Note}}, nil
}

var errRefused = errors.New("refused")

func TestHook(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e := adaptertest.Setup(t, db, nil)
		client := open(db)
		client.Order.Use(entoutbox.Hook[*entdb.Tx](e.Ob, placed, core.WithHeaders(map[string]string{"source": "hook"})))

		// Committed: the order and its event.
		if err := entoutbox.InTx(ctx, e.Ob, client.Tx, func(ctx context.Context, tx *entdb.Tx, _ *core.TxPublisher) error {
			return tx.Order.Create().SetID(1).SetNote("kept").Exec(ctx)
		}); err != nil {
			t.Fatalf("InTx: %v", err)
		}
		// Rolled back: neither.
		if err := entoutbox.InTx(ctx, e.Ob, client.Tx, func(ctx context.Context, tx *entdb.Tx, _ *core.TxPublisher) error {
			if err := tx.Order.Create().SetID(2).SetNote("dropped").Exec(ctx); err != nil {
				return err
			}
			return errRefused
		}); !errors.Is(err, errRefused) {
			t.Fatalf("InTx returned %v, want errRefused", err)
		}
		// A plain ent transaction, committed.
		tx, err := client.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Order.Create().SetID(3).SetNote("plain tx").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// Outside a transaction: stored on its own.
		if err := client.Order.Create().SetID(4).SetNote("no tx").Exec(ctx); err != nil {
			t.Fatalf("create outside a transaction: %v", err)
		}
		if got := e.OrderIDs(t); !slices.Equal(got, []int64{1, 3, 4}) {
			t.Fatalf("orders %v, want [1 3 4]", got)
		}
		pending := e.Pending(t, "orders")
		var ids []int64
		for _, p := range pending {
			var ev adaptertest.Event
			if err := jsonUnmarshal(p.Payload, &ev); err != nil {
				t.Fatal(err)
			}
			if p.Headers["source"] != "hook" {
				t.Fatalf("headers %v, want the hook's options applied", p.Headers)
			}
			ids = append(ids, ev.OrderID)
		}
		if !slices.Equal(ids, []int64{1, 3, 4}) {
			t.Fatalf("events for orders %v, want [1 3 4]", ids)
		}
	})
}

func TestHookRequireTransaction(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e := adaptertest.Setup(t, db, func(c *core.Config) { c.RequireTransaction = true })
		client := open(db)
		client.Order.Use(entoutbox.Hook[*entdb.Tx](e.Ob, placed))
		err := client.Order.Create().SetID(1).SetNote("no tx").Exec(ctx)
		if !errors.Is(err, core.ErrNotInTransaction) {
			t.Fatalf("create outside a transaction returned %v, want core.ErrNotInTransaction", err)
		}
		if err := entoutbox.InTx(ctx, e.Ob, client.Tx, func(ctx context.Context, tx *entdb.Tx, _ *core.TxPublisher) error {
			return tx.Order.Create().SetID(2).SetNote("in tx").Exec(ctx)
		}); err != nil {
			t.Fatalf("InTx: %v", err)
		}
		if got := e.OrderIDs(t); !slices.Equal(got, []int64{2}) {
			t.Fatalf("orders %v, want only [2]: the refused mutation must not run", got)
		}
		if got := e.Pending(t, "orders"); len(got) != 1 {
			t.Fatalf("%d pending, want 1", len(got))
		}
	})
}

// TestHookWakesAfterCommit: an event a hook publishes inside InTx is delivered at once
// after the commit, although the poll interval is an hour.
func TestHookWakesAfterCommit(t *testing.T) {
	db := dbtest.SQLite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	delivered := make(chan int64, 1)
	e := adaptertest.Setup(t, db, func(c *core.Config) {
		c.Manual = false
		c.Outboxes["orders"] = core.OutboxConfig{PollInterval: time.Hour, Relay: core.RelayFunc(func(_ context.Context, b []core.Envelope) error {
			for _, env := range b {
				delivered <- env.ID
			}
			return nil
		})}
	})
	client := open(db)
	client.Order.Use(entoutbox.Hook[*entdb.Tx](e.Ob, placed))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Ob.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for {
		st, err := e.Ob.Status(ctx, "orders")
		if err == nil && st[0].LeaseHeld {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("worker did not start")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := entoutbox.InTx(ctx, e.Ob, client.Tx, func(ctx context.Context, tx *entdb.Tx, _ *core.TxPublisher) error {
		if err := tx.Order.Create().SetID(1).SetNote("wake").Exec(ctx); err != nil {
			return err
		}
		// Outlast the engine's own re-checks after a publish in a transaction.
		time.Sleep(150 * time.Millisecond)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("the hook's event was not delivered within 10s of commit: the workers were not woken")
	}
}

var update = flag.Bool("update", false, "rewrite the Atlas migration files from core.MigrationSQL")

// TestAtlasMigrationFiles keeps the committed Atlas directories equal to the core's DDL
// with a valid atlas.sum. Run `go test -run TestAtlasMigrationFiles -update` after the
// core's DDL changed.
func TestAtlasMigrationFiles(t *testing.T) {
	for _, d := range dbtest.Dialects {
		up, _, err := core.MigrationSQL(core.MigrateOptions{Dialect: d})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "migrations", string(d))
		if *update {
			if err := os.RemoveAll(path); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, "20250101000000_outboxer.sql"), []byte(up), 0o644); err != nil {
				t.Fatal(err)
			}
			dir, err := migrate.NewLocalDir(path)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := dir.Checksum()
			if err != nil {
				t.Fatal(err)
			}
			if err := migrate.WriteSumFile(dir, sum); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := entoutbox.Migrations.ReadFile("migrations/" + string(d) + "/20250101000000_outboxer.sql")
		if err != nil || string(got) != up {
			t.Errorf("%s differs from core.MigrationSQL (%v): run go test -run TestAtlasMigrationFiles -update", path, err)
		}
		dir, err := migrate.NewLocalDir(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := migrate.Validate(dir); err != nil {
			t.Errorf("%s: atlas.sum: %v", path, err)
		}
	}
}

// TestAtlasMigrationCreatesCoreTables applies the Atlas file, statement by statement as
// Atlas does, and compares the tables with core.Migrate's.
func TestAtlasMigrationCreatesCoreTables(t *testing.T) {
	adaptertest.CheckMigration(t, dbtest.Dialects, func(ctx context.Context, db *dbtest.DB) error {
		script, err := entoutbox.Migrations.ReadFile("migrations/" + string(db.Dialect) + "/20250101000000_outboxer.sql")
		if err != nil {
			return err
		}
		for _, stmt := range adaptertest.SplitScript(string(script)) {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}, nil)
}
