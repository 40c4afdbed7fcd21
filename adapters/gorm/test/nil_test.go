package gormoutbox_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	gormoutbox "github.com/outboxer-go/outboxer/adapters/gorm"
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
	for name, db := range map[string]*gorm.DB{"nil *gorm.DB": nil, "zero gorm.DB": {}} {
		wantInvalid(t, name+": Publish", func() error { _, err := gormoutbox.Publish(ctx, ob, db, msg); return err })
		wantInvalid(t, name+": PublishAll", func() error { _, err := gormoutbox.PublishAll(ctx, ob, db, []core.Message{msg, msg}); return err })
		wantInvalid(t, name+": InTx", func() error {
			return gormoutbox.InTx(ctx, ob, db, func(*gorm.DB, *core.TxPublisher) error { return nil })
		})
		wantInvalid(t, name+": Migrate", func() error { return gormoutbox.Migrate(ctx, db, core.MigrateOptions{}) })
		wantInvalid(t, name+": MigrateDown", func() error { return gormoutbox.MigrateDown(ctx, db, core.MigrateOptions{}) })
		wantInvalid(t, name+": core Publish of Executor", func() error { _, err := ob.Publish(ctx, gormoutbox.Executor(db), msg); return err })
		if d := gormoutbox.Dialect(db); d != "" {
			t.Errorf("%s: Dialect = %q", name, d)
		}
	}
}
