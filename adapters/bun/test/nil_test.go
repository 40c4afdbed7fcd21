package bunoutbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/uptrace/bun"

	bunoutbox "github.com/outboxer-go/outboxer/adapters/bun"
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
	for name, db := range map[string]bun.IDB{"nil bun.IDB": nil, "nil *bun.DB": (*bun.DB)(nil), "zero bun.Tx": bun.Tx{}, "nil *bun.Tx": (*bun.Tx)(nil), "zero bun.Conn": bun.Conn{}} {
		wantInvalid(t, name+": Publish", func() error { _, err := bunoutbox.Publish(ctx, ob, db, msg); return err })
		wantInvalid(t, name+": PublishAll", func() error { _, err := bunoutbox.PublishAll(ctx, ob, db, []core.Message{msg, msg}); return err })
		wantInvalid(t, name+": InTx", func() error {
			return bunoutbox.InTx(ctx, ob, db, func(context.Context, bun.Tx, *core.TxPublisher) error { return nil })
		})
		wantInvalid(t, name+": core Publish of Executor", func() error { _, err := ob.Publish(ctx, bunoutbox.Executor(db), msg); return err })
		if d := bunoutbox.Dialect(db); d != "" {
			t.Errorf("%s: Dialect = %q", name, d)
		}
	}
}
