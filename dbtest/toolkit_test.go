package dbtest_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/sinktest"
)

// TestPublishBeforeMigrate: publishing into a table that was never created fails with
// an error matching core.ErrNotMigrated that says to run the migration, in and out of
// the caller's transaction, on every dialect.
func TestPublishBeforeMigrate(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ob, err := core.New(core.Config{DB: db.DB, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		if err != nil {
			t.Fatal(err)
		}
		msg := core.Raw{To: "orders", Type: "order.created", Key: "order:1", Data: []byte(`{}`)}
		check := func(how string, err error) {
			t.Helper()
			if !errors.Is(err, core.ErrNotMigrated) {
				t.Fatalf("%s: %v, want an error matching core.ErrNotMigrated", how, err)
			}
			if !strings.Contains(err.Error(), "Migrate") || !strings.Contains(err.Error(), "outboxer_messages") {
				t.Fatalf("%s: %q does not name the table and the migration", how, err)
			}
		}
		_, err = ob.Publish(ctx, db.DB, msg)
		check("Publish on the pool", err)
		_, err = ob.PublishAll(ctx, db.DB, []core.Message{msg, msg})
		check("PublishAll on the pool", err)

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ob.Publish(ctx, tx, msg)
		check("Publish in the caller's transaction", err)
		// On PostgreSQL the transaction is now aborted; the caller rolls back.
		if err := tx.Rollback(); err != nil {
			t.Fatalf("rollback: %v", err)
		}

		// Another error is not taken for a missing table.
		if err := core.Migrate(ctx, db.DB, core.MigrateOptions{}); err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		ccancel()
		if _, err = ob.Publish(cctx, db.DB, msg); err == nil || errors.Is(err, core.ErrNotMigrated) {
			t.Fatalf("Publish with a cancelled context: %v, want an error other than ErrNotMigrated", err)
		}
		if _, err := ob.Publish(ctx, db.DB, msg); err != nil {
			t.Fatalf("Publish after Migrate: %v", err)
		}
	})
}

// TestPublishRefusesReservedHeaders: a header the sinks reserve is refused at Publish,
// naming it, and nothing is written.
func TestPublishRefusesReservedHeaders(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := core.Migrate(ctx, db.DB, core.MigrateOptions{}); err != nil {
			t.Fatal(err)
		}
		ob, err := core.New(core.Config{DB: db.DB, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{core.HeaderKey, "outboxer-id", "Outboxer-Type", "outboxer_id", "outboxer-group-key"} {
			_, err := ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "t", Data: []byte(`{}`), Header: map[string]string{name: "x"}})
			if !errors.Is(err, core.ErrInvalidMessage) || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
				t.Errorf("header %q in the message: %v, want ErrInvalidMessage naming it", name, err)
			}
			_, err = ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "t", Data: []byte(`{}`)}, core.WithHeaders(map[string]string{name: "x"}))
			if !errors.Is(err, core.ErrInvalidMessage) {
				t.Errorf("header %q with WithHeaders: %v, want ErrInvalidMessage", name, err)
			}
		}
		// Names that only look alike are the user's.
		for _, name := range []string{"outboxer", "outboxerid", "x-outboxer-id", "trace-id"} {
			if _, err := ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "t", Data: []byte(`{}`), Header: map[string]string{name: "x"}}); err != nil {
				t.Errorf("header %q: %v", name, err)
			}
		}
		c, err := ob.Counts(ctx, "orders")
		if err != nil || c.Pending != 4 {
			t.Fatalf("counts: %+v, %v; want the 4 accepted messages only", c, err)
		}
	})
}

// memDest is a destination taking one message per call, for the engine runs below.
type memDest struct {
	mu  sync.Mutex
	got []sinktest.Received
}

var (
	poisonTransient = []byte(`{"poison":"transient"}`) // refused every time, not for good
	poisonPermanent = []byte(`{"poison":"permanent"}`) // refused with core.Permanent
)

func (d *memDest) send(_ context.Context, e core.Envelope) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case bytes.Equal(e.Payload, poisonTransient):
		return fmt.Errorf("destination refuses message %d: poison payload", e.ID)
	case bytes.Equal(e.Payload, poisonPermanent):
		return core.Permanent(fmt.Errorf("destination refuses message %d for good: poison payload", e.ID))
	}
	d.got = append(d.got, sinktest.Received{ID: e.ID, Outbox: e.Outbox, Type: e.Type, GroupKey: e.GroupKey, Payload: e.Payload, Headers: e.Headers})
	return nil
}

func (d *memDest) read(ctx context.Context, n int) ([]sinktest.Received, error) {
	for {
		d.mu.Lock()
		out := slices.Clone(d.got)
		d.mu.Unlock()
		if len(out) >= n {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestToolkitPoisonThroughEngine: relays built with core.PerMessage, alone and wrapped
// in Filter, Map and FanOut, run by the real engine on every dialect through the sink
// suite's Poison case: a poison retried boundedly or dead at once, its group blocked
// and freed by Discard, every other group delivered in order.
func TestToolkitPoisonThroughEngine(t *testing.T) {
	build := map[string]func(d *memDest) core.Relay{
		"PerMessage": func(d *memDest) core.Relay { return core.PerMessage(core.OrderGroup, d.send) },
		"Filter+Map": func(d *memDest) core.Relay {
			return core.Filter(core.Map(core.OrderGroup, core.PerMessage(core.OrderGroup, d.send),
				func(_ context.Context, e core.Envelope) (core.Envelope, error) { return e, nil }),
				func(core.Envelope) bool { return true })
		},
		"FanOut": func(d *memDest) core.Relay {
			mirror := &memDest{}
			return core.FanOut(core.OrderGroup, core.PerMessage(core.OrderGroup, mirror.send), core.PerMessage(core.OrderGroup, d.send))
		},
	}
	for _, name := range []string{"PerMessage", "Filter+Map", "FanOut"} {
		t.Run(name, func(t *testing.T) {
			for _, d := range dbtest.Dialects {
				t.Run(string(d), func(t *testing.T) {
					sinktest.RunPoison(t, sinktest.Harness{
						New: func(t *testing.T) *sinktest.Target {
							dest := &memDest{}
							return &sinktest.Target{Relay: build[name](dest), Read: dest.read}
						},
						DB: func(t *testing.T) *sql.DB { return dbtest.Open(t, d).DB },
						Poisons: []sinktest.Poison{
							{Name: "transient", Payload: poisonTransient, Reason: "poison payload", By: "sink: test"},
							{Name: "permanent", Payload: poisonPermanent, Permanent: true, Reason: "for good", By: "sink: test"},
						},
						Timeout: 120 * time.Second,
					})
				})
			}
		})
	}
}

// TestHealthOwnerAfterGracefulStop: PartitionHealth.Owner names the owner while it holds
// the lease, and is empty once the owner released it on a graceful stop (as its doc says).
func TestHealthOwnerAfterGracefulStop(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := core.Migrate(ctx, db.DB, core.MigrateOptions{}); err != nil {
			t.Fatal(err)
		}
		noop := core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
		ob, err := core.New(core.Config{Name: "node-a", DB: db.DB, Logger: slog.New(slog.DiscardHandler),
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: noop}}})
		if err != nil {
			t.Fatal(err)
		}
		owner := func() (string, bool) {
			h, err := ob.Health(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			oh, ok := h.Outbox("orders")
			if !ok || len(oh.Partitions) != 1 {
				return "", false
			}
			return oh.Partitions[0].Owner, oh.Partitions[0].LeaseHeld
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- ob.Run(runCtx) }()
		for {
			if o, held := owner(); held && o != "" {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the partition was never owned")
			case <-time.After(20 * time.Millisecond):
			}
		}
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		if o, held := owner(); o != "" || held {
			t.Fatalf("after a graceful stop: Owner %q, LeaseHeld %v; want \"\" and false", o, held)
		}
	})
}
