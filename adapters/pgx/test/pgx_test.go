package pgxoutbox_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func pool(t testing.TB, db *dbtest.DB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), db.DSN)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

var adapter = adaptertest.Adapter{
	Dialects: []core.Dialect{core.Postgres},
	Open:     func(t testing.TB, db *dbtest.DB) adaptertest.ORM { return orm{pool(t, db)} },
}

func TestConformance(t *testing.T) { adaptertest.Run(t, adapter) }

func BenchmarkPublish(b *testing.B) { adaptertest.Bench(b, adapter) }

// BenchmarkPublishInterleaved is dbtest's benchmark of the same name through pgx itself:
// business transactions (BEGIN; INSERT an order; …; COMMIT) on a pool, bare, with a
// hand-written INSERT of an equivalent outbox row, with Publish, with PublishAll of ten
// messages, with the hand-written INSERT … RETURNING its ID, and with a hand-written
// INSERT of ten rows, timed in turn; reported are medians of what each adds to the bare
// transaction, and the ratios:
//
//	go test -run '^$' -bench PublishInterleaved -benchtime 3000x ./adapters/pgx
func BenchmarkPublishInterleaved(b *testing.B) {
	db := dbtest.Postgres(b)
	e := adaptertest.Setup(b, db, nil)
	p := pool(b, db)
	ctx := context.Background()
	msg := adaptertest.Event{OrderID: 1, Note: "placed", Group: "order:1"}
	payload, err := json.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	ten := make([]core.Message, 10)
	for i := range ten {
		ten[i] = adaptertest.Event{OrderID: int64(i), Note: "placed", Group: "order:1"}
	}
	const plain = `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`
	args := []any{"orders", "order.placed", "order:1", 0, payload, nil}
	plain10 := plain
	var args10 []any
	for i := range 10 {
		if i > 0 {
			plain10 += fmt.Sprintf(", ($%d, $%d, $%d, $%d, $%d, $%d)", 6*i+1, 6*i+2, 6*i+3, 6*i+4, 6*i+5, 6*i+6)
		}
		args10 = append(args10, args...)
	}
	variants := []func(pgx.Tx) error{
		func(pgx.Tx) error { return nil },
		func(tx pgx.Tx) error { _, err := tx.Exec(ctx, plain, args...); return err },
		func(tx pgx.Tx) error { _, err := pgxoutbox.Publish(ctx, e.Ob, tx, msg); return err },
		func(tx pgx.Tx) error { _, err := pgxoutbox.PublishAll(ctx, e.Ob, tx, ten); return err },
		func(tx pgx.Tx) error {
			var id int64
			var created time.Time
			return tx.QueryRow(ctx, plain+` RETURNING id, created_at`, args...).Scan(&id, &created)
		},
		func(tx pgx.Tx) error { _, err := tx.Exec(ctx, plain10, args10...); return err },
	}
	id := 0
	runs := make([]func() error, len(variants))
	for v, publish := range variants {
		runs[v] = func() error {
			id++
			return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, 'placed')`, id); err != nil {
					return err
				}
				return publish(tx)
			})
		}
	}
	dbtest.ReportPublish(b, dbtest.Interleave(b, runs...))
}

// TestSerializeWritesOnPool: publishing through a pool with SerializeWrites takes its
// lock in a transaction of its own.
func TestSerializeWritesOnPool(t *testing.T) {
	db := dbtest.Postgres(t)
	e := adaptertest.Setup(t, db, func(c *core.Config) {
		oc := c.Outboxes["orders"]
		oc.SerializeWrites = true
		c.Outboxes["orders"] = oc
	})
	p := pool(t, db)
	ctx := context.Background()
	if _, err := pgxoutbox.Publish(ctx, e.Ob, p, adaptertest.Event{OrderID: 1, Group: "order:1"}); err != nil {
		t.Fatalf("Publish on a pool with SerializeWrites: %v", err)
	}
	if got := e.Pending(t, "orders"); len(got) != 1 || got[0].GroupKey != "order:1" {
		t.Fatalf("pending %+v, want the one message", got)
	}
}

var update = flag.Bool("update", false, "rewrite the SQL files in migrations/ from core.MigrationSQL")

// TestMigrationFilesMatchCore keeps the committed SQL files equal to the core's DDL.
// Run `go test -run TestMigrationFilesMatchCore -update` after the core's DDL changed.
func TestMigrationFilesMatchCore(t *testing.T) {
	up, down, err := core.MigrationSQL(core.MigrateOptions{Dialect: core.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"000001_outboxer.up.sql": up, "000001_outboxer.down.sql": down} {
		path := filepath.Join("..", "migrations", "postgres", name)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := pgxoutbox.Migrations.ReadFile("migrations/postgres/" + name)
		if err != nil || string(got) != want {
			t.Errorf("%s differs from core.MigrationSQL (%v): run go test -run TestMigrationFilesMatchCore -update", path, err)
		}
	}
}

func TestMigrate(t *testing.T) {
	adaptertest.CheckMigration(t, []core.Dialect{core.Postgres},
		func(ctx context.Context, db *dbtest.DB) error {
			return pgxoutbox.Migrate(ctx, pool(t, db), core.MigrateOptions{})
		},
		func(ctx context.Context, db *dbtest.DB) error {
			return pgxoutbox.MigrateDown(ctx, pool(t, db), core.MigrateOptions{})
		})
}

// TestMigrationFile applies the committed up file as one script (pgx sends a statement
// without arguments in the simple protocol, which takes several at once).
func TestMigrationFile(t *testing.T) {
	run := func(name string) func(ctx context.Context, db *dbtest.DB) error {
		return func(ctx context.Context, db *dbtest.DB) error {
			script, err := pgxoutbox.Migrations.ReadFile("migrations/postgres/" + name)
			if err != nil {
				return err
			}
			_, err = pool(t, db).Exec(ctx, string(script))
			return err
		}
	}
	adaptertest.CheckMigration(t, []core.Dialect{core.Postgres}, run("000001_outboxer.up.sql"), run("000001_outboxer.down.sql"))
}

type orm struct{ pool *pgxpool.Pool }

func (o orm) InTx(ctx context.Context, ob *core.Outboxer, fn func(context.Context, adaptertest.Tx) error) error {
	return pgxoutbox.InTx(ctx, ob, o.pool, func(ctx context.Context, tx pgx.Tx, p *core.TxPublisher) error {
		return fn(ctx, txn{tx: tx, ob: ob, publish: p.Publish})
	})
}

func (o orm) Begin(ctx context.Context, ob *core.Outboxer) (adaptertest.OpenTx, error) {
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return txn{tx: tx, ob: ob}, nil
}

func (o orm) Publish(ctx context.Context, ob *core.Outboxer, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return pgxoutbox.Publish(ctx, ob, o.pool, m, opts...)
}

func (o orm) PublishAll(ctx context.Context, ob *core.Outboxer, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	return pgxoutbox.PublishAll(ctx, ob, o.pool, msgs, opts...)
}

type txn struct {
	tx      pgx.Tx
	ob      *core.Outboxer
	publish func(context.Context, core.Message, ...core.PublishOption) (core.Envelope, error) // nil: pgxoutbox.Publish
}

func (t txn) InsertOrder(ctx context.Context, id int64, note string) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, id, note)
	return err
}

func (t txn) Publish(ctx context.Context, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if t.publish != nil {
		return t.publish(ctx, m, opts...)
	}
	return pgxoutbox.Publish(ctx, t.ob, t.tx, m, opts...)
}

// Savepoint is pgx's Begin on a pgx.Tx (a savepoint), through InTx.
func (t txn) Savepoint(ctx context.Context, fn func(context.Context, adaptertest.Tx) error) error {
	return pgxoutbox.InTx(ctx, t.ob, t.tx, func(ctx context.Context, sp pgx.Tx, p *core.TxPublisher) error {
		return fn(ctx, txn{tx: sp, ob: t.ob, publish: p.Publish})
	})
}

func (t txn) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t txn) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
