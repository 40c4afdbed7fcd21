package pgxoutbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
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
	for name, db := range map[string]pgxoutbox.DB{"nil DB": nil, "nil *pgxpool.Pool": (*pgxpool.Pool)(nil), "nil *pgx.Conn": (*pgx.Conn)(nil), "nil *pgxpool.Conn": (*pgxpool.Conn)(nil)} {
		wantInvalid(t, name+": Publish", func() error { _, err := pgxoutbox.Publish(ctx, ob, db, msg); return err })
		wantInvalid(t, name+": PublishAll", func() error { _, err := pgxoutbox.PublishAll(ctx, ob, db, []core.Message{msg, msg}); return err })
		wantInvalid(t, name+": core Publish of Executor", func() error { _, err := ob.Publish(ctx, pgxoutbox.Executor(db), msg); return err })
	}
	var tx pgx.Tx // a nil interface
	wantInvalid(t, "nil pgx.Tx: Publish", func() error { _, err := pgxoutbox.Publish(ctx, ob, tx, msg); return err })
	for name, db := range map[string]pgxoutbox.Beginner{"nil Beginner": nil, "nil *pgxpool.Pool": (*pgxpool.Pool)(nil), "nil pgx.Tx": tx} {
		wantInvalid(t, name+": InTx", func() error {
			return pgxoutbox.InTx(ctx, ob, db, func(context.Context, pgx.Tx, *core.TxPublisher) error { return nil })
		})
		wantInvalid(t, name+": Migrate", func() error { return pgxoutbox.Migrate(ctx, db, core.MigrateOptions{}) })
	}
}
