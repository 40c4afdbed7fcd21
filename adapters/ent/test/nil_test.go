package entoutbox_test

import (
	"context"
	"errors"
	"testing"

	entoutbox "github.com/outboxer-go/outboxer/adapters/ent"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	entdb "github.com/outboxer-go/outboxer/examples/ent/ent"
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
	for name, db := range map[string]entoutbox.ExecQuerier{"nil ExecQuerier": nil, "nil *Client": (*entdb.Client)(nil), "nil *Tx": (*entdb.Tx)(nil)} {
		wantInvalid(t, name+": Publish", func() error { _, err := entoutbox.Publish(ctx, ob, db, msg); return err })
		wantInvalid(t, name+": PublishAll", func() error { _, err := entoutbox.PublishAll(ctx, ob, db, []core.Message{msg, msg}); return err })
		wantInvalid(t, name+": Savepoint", func() error { return entoutbox.Savepoint(ctx, db, "sp", func() error { return nil }) })
		wantInvalid(t, name+": core Publish of Executor", func() error { _, err := ob.Publish(ctx, entoutbox.Executor(db), msg); return err })
	}
	wantInvalid(t, "InTx with a nil begin", func() error {
		return entoutbox.InTx[*entdb.Tx](ctx, ob, nil, func(context.Context, *entdb.Tx, *core.TxPublisher) error { return nil })
	})
	wantInvalid(t, "InTx with a begin giving a nil *Tx", func() error {
		begin := func(context.Context) (*entdb.Tx, error) { return nil, nil }
		return entoutbox.InTx(ctx, ob, begin, func(context.Context, *entdb.Tx, *core.TxPublisher) error { return nil })
	})
}
