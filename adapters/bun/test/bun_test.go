package bunoutbox_test

import (
	"context"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/migrate"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	bunoutbox "github.com/outboxer-go/outboxer/adapters/bun"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Order is the business row the suite writes.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            int64  `bun:"id,pk"`
	Note          string `bun:"note"`
}

func open(db *dbtest.DB) *bun.DB {
	switch db.Dialect {
	case core.Postgres:
		return bun.NewDB(db.DB, pgdialect.New())
	case core.MySQL:
		return bun.NewDB(db.DB, mysqldialect.New())
	}
	return bun.NewDB(db.DB, sqlitedialect.New())
}

var adapter = adaptertest.Adapter{Open: func(t testing.TB, db *dbtest.DB) adaptertest.ORM { return orm{open(db)} }}

func TestConformance(t *testing.T) { adaptertest.Run(t, adapter) }

func BenchmarkPublish(b *testing.B) { adaptertest.Bench(b, adapter) }

// TestMigration runs the outbox migration with bun's migrator, up and back down.
func TestMigration(t *testing.T) {
	migrator := func(db *dbtest.DB) *migrate.Migrator {
		ms := migrate.NewMigrations()
		bunoutbox.AddMigration(ms, "20250101000000", core.MigrateOptions{})
		return migrate.NewMigrator(open(db), ms)
	}
	adaptertest.CheckMigration(t, dbtest.Dialects,
		func(ctx context.Context, db *dbtest.DB) error {
			m := migrator(db)
			if err := m.Init(ctx); err != nil {
				return err
			}
			g, err := m.Migrate(ctx)
			if err == nil && len(g.Migrations) != 1 {
				t.Errorf("migrated %d migrations, want 1", len(g.Migrations))
			}
			return err
		},
		func(ctx context.Context, db *dbtest.DB) error {
			_, err := migrator(db).Rollback(ctx)
			return err
		})
}

type orm struct{ db *bun.DB }

func (o orm) InTx(ctx context.Context, ob *core.Outboxer, fn func(context.Context, adaptertest.Tx) error) error {
	return bunoutbox.InTx(ctx, ob, o.db, func(ctx context.Context, tx bun.Tx, p *core.TxPublisher) error {
		return fn(ctx, txn{tx: tx, ob: ob, publish: p.Publish})
	})
}

func (o orm) Begin(ctx context.Context, ob *core.Outboxer) (adaptertest.OpenTx, error) {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return txn{tx: tx, ob: ob}, nil
}

func (o orm) Publish(ctx context.Context, ob *core.Outboxer, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return bunoutbox.Publish(ctx, ob, o.db, m, opts...)
}

func (o orm) PublishAll(ctx context.Context, ob *core.Outboxer, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	return bunoutbox.PublishAll(ctx, ob, o.db, msgs, opts...)
}

type txn struct {
	tx      bun.Tx
	ob      *core.Outboxer
	publish func(context.Context, core.Message, ...core.PublishOption) (core.Envelope, error) // nil: bunoutbox.Publish
}

func (t txn) InsertOrder(ctx context.Context, id int64, note string) error {
	_, err := t.tx.NewInsert().Model(&Order{ID: id, Note: note}).Exec(ctx)
	return err
}

func (t txn) Publish(ctx context.Context, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if t.publish != nil {
		return t.publish(ctx, m, opts...)
	}
	return bunoutbox.Publish(ctx, t.ob, t.tx, m, opts...)
}

// Savepoint is bun's RunInTx on a bun.Tx (SAVEPOINT … ROLLBACK TO SAVEPOINT), through InTx.
func (t txn) Savepoint(ctx context.Context, fn func(context.Context, adaptertest.Tx) error) error {
	return bunoutbox.InTx(ctx, t.ob, t.tx, func(ctx context.Context, sp bun.Tx, p *core.TxPublisher) error {
		return fn(ctx, txn{tx: sp, ob: t.ob, publish: p.Publish})
	})
}

func (t txn) Commit(context.Context) error   { return t.tx.Commit() }
func (t txn) Rollback(context.Context) error { return t.tx.Rollback() }
