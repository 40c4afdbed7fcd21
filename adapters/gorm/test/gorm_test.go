package gormoutbox_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	gormoutbox "github.com/outboxer-go/outboxer/adapters/gorm"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestMain(m *testing.M) {
	// gorm's PrepareStmt cache starts an expiry goroutine that gorm never stops.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}

// Order is the business row the suite writes.
type Order struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false"`
	Note string
}

// open puts gorm on the test database's own *sql.DB. For SQLite that is a
// modernc.org/sqlite pool under gorm's SQLite dialector.
func open(t testing.TB, db *dbtest.DB, prepare bool) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch db.Dialect {
	case core.Postgres:
		d = postgres.New(postgres.Config{Conn: db.DB})
	case core.MySQL:
		d = mysql.New(mysql.Config{Conn: db.DB})
	case core.SQLite:
		d = sqlite.New(sqlite.Config{Conn: db.DB})
	}
	g, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard, PrepareStmt: prepare})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	return g
}

func adapter(prepare bool) adaptertest.Adapter {
	return adaptertest.Adapter{Open: func(t testing.TB, db *dbtest.DB) adaptertest.ORM {
		return orm{open(t, db, prepare)}
	}}
}

func TestConformance(t *testing.T) { adaptertest.Run(t, adapter(false)) }

// With PrepareStmt, gorm wraps the transaction in its statement cache.
func TestConformancePrepareStmt(t *testing.T) { adaptertest.Run(t, adapter(true)) }

func BenchmarkPublish(b *testing.B) { adaptertest.Bench(b, adapter(false)) }

func TestMigrate(t *testing.T) {
	adaptertest.CheckMigration(t, dbtest.Dialects,
		func(ctx context.Context, db *dbtest.DB) error {
			return gormoutbox.Migrate(ctx, open(t, db, false), core.MigrateOptions{})
		},
		func(ctx context.Context, db *dbtest.DB) error {
			return gormoutbox.MigrateDown(ctx, open(t, db, false), core.MigrateOptions{})
		})
}

type orm struct{ db *gorm.DB }

func (o orm) InTx(ctx context.Context, ob *core.Outboxer, fn func(context.Context, adaptertest.Tx) error) error {
	return gormoutbox.InTx(ctx, ob, o.db, func(tx *gorm.DB, p *core.TxPublisher) error {
		return fn(ctx, txn{db: tx, ob: ob, publish: p.Publish})
	})
}

func (o orm) Begin(ctx context.Context, ob *core.Outboxer) (adaptertest.OpenTx, error) {
	tx := o.db.WithContext(ctx).Begin()
	if tx.Error != nil {
		return nil, tx.Error
	}
	return txn{db: tx, ob: ob}, nil
}

func (o orm) Publish(ctx context.Context, ob *core.Outboxer, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return gormoutbox.Publish(ctx, ob, o.db, m, opts...)
}

func (o orm) PublishAll(ctx context.Context, ob *core.Outboxer, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	return gormoutbox.PublishAll(ctx, ob, o.db, msgs, opts...)
}

type txn struct {
	db      *gorm.DB
	ob      *core.Outboxer
	publish func(context.Context, core.Message, ...core.PublishOption) (core.Envelope, error) // nil: gormoutbox.Publish
}

func (t txn) InsertOrder(ctx context.Context, id int64, note string) error {
	return t.db.WithContext(ctx).Create(&Order{ID: id, Note: note}).Error
}

func (t txn) Publish(ctx context.Context, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if t.publish != nil {
		return t.publish(ctx, m, opts...)
	}
	return gormoutbox.Publish(ctx, t.ob, t.db, m, opts...)
}

// Savepoint is gorm's nested Transaction, through InTx.
func (t txn) Savepoint(ctx context.Context, fn func(context.Context, adaptertest.Tx) error) error {
	return gormoutbox.InTx(ctx, t.ob, t.db, func(sp *gorm.DB, p *core.TxPublisher) error {
		return fn(ctx, txn{db: sp, ob: t.ob, publish: p.Publish})
	})
}

func (t txn) Commit(context.Context) error   { return t.db.Commit().Error }
func (t txn) Rollback(context.Context) error { return t.db.Rollback().Error }
