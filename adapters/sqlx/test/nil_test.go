package sqlxoutbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	sqlxoutbox "github.com/outboxer-go/outboxer/adapters/sqlx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// newOutboxer is an instance on a fresh SQLite database: the handles below are nil,
// not the instance.
func newOutboxer(t *testing.T) *core.Outboxer {
	t.Helper()
	db := dbtest.SQLite(t)
	ob, err := core.New(core.Config{DB: db.DB, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// wantInvalid runs f, which must return an error wrapping core.ErrInvalidExecutor and
// must not panic.
func wantInvalid(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s panicked: %v", what, p)
				err = core.ErrInvalidExecutor
			}
		}()
		err = f()
	}()
	if !errors.Is(err, core.ErrInvalidExecutor) {
		t.Errorf("%s: %v, want an error wrapping core.ErrInvalidExecutor", what, err)
	}
}

var msg = core.Raw{To: "orders", Type: "t", Data: []byte("{}")}

func TestNilHandles(t *testing.T) {
	ctx := context.Background()
	ob := newOutboxer(t)
	for name, db := range map[string]sqlx.ExtContext{"nil ExtContext": nil, "nil *sqlx.DB": (*sqlx.DB)(nil), "nil *sqlx.Tx": (*sqlx.Tx)(nil), "zero sqlx.DB": &sqlx.DB{}, "zero sqlx.Tx": &sqlx.Tx{}} {
		wantInvalid(t, name+": Publish", func() error { _, err := sqlxoutbox.Publish(ctx, ob, db, msg); return err })
		wantInvalid(t, name+": PublishAll", func() error { _, err := sqlxoutbox.PublishAll(ctx, ob, db, []core.Message{msg, msg}); return err })
	}
	for name, db := range map[string]*sqlx.DB{"nil *sqlx.DB": nil, "zero sqlx.DB": {}} {
		wantInvalid(t, name+": InTx", func() error {
			return sqlxoutbox.InTx(ctx, ob, db, nil, func(*sqlx.Tx, *core.TxPublisher) error { return nil })
		})
		wantInvalid(t, name+": Migrate", func() error { return sqlxoutbox.Migrate(ctx, db, core.MigrateOptions{}) })
		wantInvalid(t, name+": MigrateDown", func() error { return sqlxoutbox.MigrateDown(ctx, db, core.MigrateOptions{}) })
	}
	wantInvalid(t, "Savepoint on a nil *sqlx.Tx", func() error { return sqlxoutbox.Savepoint(ctx, nil, "sp", func() error { return nil }) })
}
