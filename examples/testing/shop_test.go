package main

// How to test code that publishes: run the service's own Outboxer configuration in Manual
// mode with a coretest.Recorder as the relay. Nothing runs in the background; Drain
// delivers what is deliverable, synchronously, and the test checks what the relay got.
// coretest.FailIDs makes the relay refuse chosen messages: wrapped in core.Permanent they
// are dead at once; a plain error is retried after the outbox's Backoff.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
)

func newTestShop(t *testing.T) (*Shop, *coretest.Recorder) {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "shop.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	rec := &coretest.Recorder{}
	cfg := outboxConfig(db, rec)
	cfg.Manual = true // no workers: Drain delivers
	ob, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Shop{db: db, ob: ob}, rec
}

func TestPlaceOrderPublishesOrderPlaced(t *testing.T) {
	ctx := context.Background()
	shop, rec := newTestShop(t)
	if err := shop.PlaceOrder(ctx, 1, 25.5); err != nil {
		t.Fatal(err)
	}
	if err := shop.PlaceOrder(ctx, 1, 99); err == nil { // a duplicate: rolled back
		t.Fatal("placing order 1 twice succeeded")
	}
	res, err := shop.ob.Drain(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if res != (core.DrainResult{Delivered: 1}) {
		t.Fatalf("drain: %+v, want one delivered", res)
	}
	got := rec.Delivered()
	if len(got) != 1 || got[0].Type != "shop.OrderPlaced" || got[0].GroupKey != "order:1" {
		t.Fatalf("delivered %+v, want one shop.OrderPlaced for order:1", got)
	}
	var ev OrderPlaced
	if err := json.Unmarshal(got[0].Payload, &ev); err != nil || ev != (OrderPlaced{OrderID: 1, Total: 25.5}) {
		t.Fatalf("payload %s (%v)", got[0].Payload, err)
	}
}

func TestRefusedEventIsKeptAndRetried(t *testing.T) {
	ctx := context.Background()
	shop, rec := newTestShop(t)
	for id := 1; id <= 3; id++ {
		if err := shop.PlaceOrder(ctx, id, 10*float64(id)); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := shop.ob.ListPending(ctx, "orders", 0)
	if err != nil || len(pending) != 3 || pending[1].GroupKey != "order:2" {
		t.Fatalf("pending: %+v, %v", pending, err)
	}
	refused := pending[1].ID

	// The broker refuses order 2's event for good (core.Permanent: no retry): the others
	// go through, and it is kept as dead with the reason.
	rec.Fail = coretest.FailIDs(core.Permanent(errors.New("schema rejected")), refused)
	res, err := shop.ob.Drain(ctx, "orders")
	if err != nil || res != (core.DrainResult{Delivered: 2, Dead: 1}) {
		t.Fatalf("first drain: %+v, %v", res, err)
	}
	dead, err := shop.ob.ListDead(ctx, "orders", 0)
	if err != nil || len(dead) != 1 || dead[0].ID != refused || dead[0].LastError != "schema rejected" {
		t.Fatalf("dead: %+v, %v", dead, err)
	}

	// The broker is fixed: the dead event is put back, pending under its old ID, and the
	// next Drain delivers it.
	rec.Fail = nil
	if n, err := shop.ob.RetryDead(ctx, "orders", refused); err != nil || n != 1 {
		t.Fatalf("RetryDead: %d, %v", n, err)
	}
	pending, err = shop.ob.ListPending(ctx, "orders", 0)
	if err != nil || len(pending) != 1 || pending[0].ID != refused || pending[0].Attempts != 0 {
		t.Fatalf("pending after RetryDead: %+v, %v", pending, err)
	}
	if res, err := shop.ob.Drain(ctx, "orders"); err != nil || res != (core.DrainResult{Delivered: 1}) {
		t.Fatalf("second drain: %+v, %v", res, err)
	}
	var got []string
	for _, e := range rec.Delivered() {
		got = append(got, e.GroupKey)
	}
	if want := []string{"order:1", "order:3", "order:2"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}
