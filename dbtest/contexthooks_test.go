package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

type ctxKey struct{}

// publishCall is what one call of Hooks.OnPublishContext saw, and what its done got.
type publishCall struct {
	ctxValue any
	ev       core.PublishEvent
	doneRuns int
	envs     []core.Envelope
	err      error
}

// contextHook records its calls and returns headers.
func contextHook(calls *[]*publishCall, headers map[string]string) func(context.Context, core.PublishEvent) (map[string]string, func([]core.Envelope, error)) {
	return func(ctx context.Context, ev core.PublishEvent) (map[string]string, func([]core.Envelope, error)) {
		c := &publishCall{ctxValue: ctx.Value(ctxKey{}), ev: ev}
		*calls = append(*calls, c)
		return headers, func(envs []core.Envelope, err error) {
			c.doneRuns++
			c.envs, c.err = envs, err
		}
	}
}

func TestPublishContextHookHeadersLandInTheRows(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		var calls []*publishCall
		hookHeaders := map[string]string{"traceparent": "tp-1", "shared": "from-hook", "opt": "from-hook"}
		ob := setup(t, db, core.Config{
			Hooks: core.Hooks{OnPublishContext: contextHook(&calls, hookHeaders)},
			Outboxes: map[string]core.OutboxConfig{
				"orders":   {Relay: &recorder{}},
				"invoices": {Relay: &recorder{}},
			},
		})
		ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		envs, err := ob.PublishAll(ctx, tx, []core.Message{
			event{Seq: 1, Hdr: map[string]string{"shared": "from-message"}},
			event{Seq: 2},
			event{Seq: 3, Box: "invoices"},
		}, core.WithHeaders(map[string]string{"opt": "from-option"}))
		if err != nil {
			t.Fatalf("PublishAll: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// A header the message or WithHeaders sets wins; the hook fills in the rest.
		want := []map[string]string{
			{"traceparent": "tp-1", "shared": "from-message", "opt": "from-option"},
			{"traceparent": "tp-1", "shared": "from-hook", "opt": "from-option"},
			{"traceparent": "tp-1", "shared": "from-hook", "opt": "from-option"},
		}
		for i, env := range envs {
			if !maps.Equal(env.Headers, want[i]) {
				t.Errorf("returned envelope %d headers = %v, want %v", i, env.Headers, want[i])
			}
		}
		stored := map[int64]map[string]string{}
		for _, box := range []string{"orders", "invoices"} {
			pending, err := ob.ListPending(ctx, box, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, env := range pending {
				stored[env.ID] = env.Headers
			}
		}
		for i, env := range envs {
			if got := stored[env.ID]; !maps.Equal(got, want[i]) {
				t.Errorf("stored message %d headers = %v, want %v", env.ID, got, want[i])
			}
		}
		// The hook's map is not changed by the publish.
		if !maps.Equal(hookHeaders, map[string]string{"traceparent": "tp-1", "shared": "from-hook", "opt": "from-hook"}) {
			t.Errorf("hook's headers changed to %v", hookHeaders)
		}

		if len(calls) != 1 {
			t.Fatalf("hook called %d times, want 1", len(calls))
		}
		c := calls[0]
		if c.ctxValue != "caller" {
			t.Errorf("hook's context value = %v, want the caller's", c.ctxValue)
		}
		if c.ev.Name != core.DefaultName || c.ev.Count != 3 || !slices.Equal(c.ev.Outboxes, []string{"orders", "invoices"}) {
			t.Errorf("hook's event = %+v, want name %q, 3 messages, outboxes [orders invoices]", c.ev, core.DefaultName)
		}
		if c.doneRuns != 1 || c.err != nil || len(c.envs) != 3 {
			t.Fatalf("done ran %d times with %d envelopes and %v, want once with 3 and nil", c.doneRuns, len(c.envs), c.err)
		}
		for i := range envs {
			if c.envs[i].ID != envs[i].ID {
				t.Errorf("done's envelope %d has ID %d, Publish returned %d", i, c.envs[i].ID, envs[i].ID)
			}
		}

		// Publish goes through the hook too, with the outbox WithOutbox names.
		env, err := ob.Publish(ctx, db.DB, event{Seq: 4}, core.WithOutbox("invoices"))
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 2 || !slices.Equal(calls[1].ev.Outboxes, []string{"invoices"}) || calls[1].ev.Count != 1 {
			t.Fatalf("after Publish: %d calls, last event %+v; want 2, outboxes [invoices], 1 message", len(calls), calls[len(calls)-1].ev)
		}
		if env.Headers["traceparent"] != "tp-1" || calls[1].doneRuns != 1 || len(calls[1].envs) != 1 || calls[1].envs[0].ID != env.ID {
			t.Errorf("Publish: headers %v, done ran %d times with %v", env.Headers, calls[1].doneRuns, calls[1].envs)
		}
	})
}

func TestPublishContextHookDoneGetsTheError(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		var calls []*publishCall
		ob := setup(t, db, core.Config{Hooks: core.Hooks{OnPublishContext: contextHook(&calls, map[string]string{"traceparent": "tp-2"})}})
		ctx := context.Background()

		// A write that fails: the transaction is already over.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		_, pubErr := ob.Publish(ctx, tx, event{Seq: 1})
		if pubErr == nil {
			t.Fatal("Publish on a finished transaction succeeded")
		}
		// A message that is refused before any write.
		_, badErr := ob.Publish(ctx, db.DB, event{Seq: 2, Box: "nowhere"})
		if !errors.Is(badErr, core.ErrUnknownOutbox) {
			t.Fatalf("Publish to an unknown outbox: %v, want ErrUnknownOutbox", badErr)
		}
		if len(calls) != 2 {
			t.Fatalf("hook called %d times, want 2", len(calls))
		}
		for i, want := range []error{pubErr, badErr} {
			c := calls[i]
			if c.doneRuns != 1 || c.envs != nil || c.err != want {
				t.Errorf("call %d: done ran %d times with %v and %v, want once with nil and %v", i, c.doneRuns, c.envs, c.err, want)
			}
		}
		if !slices.Equal(calls[1].ev.Outboxes, []string{"nowhere"}) {
			t.Errorf("event of the refused publish names %v, want [nowhere]", calls[1].ev.Outboxes)
		}
		if c := counts(t, ob, "orders"); c.Pending != 0 {
			t.Errorf("pending = %d after failed publishes, want 0", c.Pending)
		}

		// An empty call writes nothing and does not reach the hook.
		if envs, err := ob.PublishAll(ctx, db.DB, nil); err != nil || envs != nil {
			t.Fatalf("PublishAll(nil) = %v, %v", envs, err)
		}
		if len(calls) != 2 {
			t.Errorf("hook called for an empty PublishAll")
		}
	})
}

// ctxRelay records the context value each delivery gets, through Deliver or, with tx
// set, DeliverTx, and whether that context has the delivery deadline.
type ctxRelay struct {
	values    []any
	deadlines []bool
	throughTx int
}

func (r *ctxRelay) Deliver(ctx context.Context, batch []core.Envelope) error {
	r.values = append(r.values, ctx.Value(ctxKey{}))
	_, ok := ctx.Deadline()
	r.deadlines = append(r.deadlines, ok)
	return nil
}

type ctxTxRelay struct{ *ctxRelay }

func (r ctxTxRelay) DeliverTx(ctx context.Context, _ *sql.Tx, batch []core.Envelope) error {
	r.throughTx++
	return r.Deliver(ctx, batch)
}

// TestBatchContextHookReachesTheRelay: the context Hooks.OnBatchContext returns is the
// one the relay delivers with, under the delivery deadline, through Deliver and DeliverTx;
// the hook sees the batch's event, after OnBatchStart; a nil context keeps the worker's.
func TestBatchContextHookReachesTheRelay(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(map[bool]string{false: "Deliver", true: "DeliverTx"}[tx], func(t *testing.T) {
			db := dbtest.SQLite(t)
			ctx := context.Background()
			inner := &ctxRelay{}
			var relay core.Relay = inner
			if tx {
				relay = ctxTxRelay{inner}
			}
			var order []string
			var seen []core.BatchEvent
			hooks := core.Hooks{
				OnBatchStart: func(core.BatchEvent) { order = append(order, "start") },
				OnBatchContext: func(ctx context.Context, ev core.BatchEvent) context.Context {
					order = append(order, "context")
					seen = append(seen, ev)
					if len(seen) == 2 {
						return nil
					}
					return context.WithValue(ctx, ctxKey{}, "batch of "+ev.Outbox)
				},
				OnBatchStop: func(core.BatchEvent) { order = append(order, "stop") },
			}
			ob := setup(t, db, core.Config{Manual: true, Hooks: hooks,
				Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, BatchSize: 2}}})
			publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "a"}, event{Seq: 3, Group: "a"})
			if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 3 {
				t.Fatalf("Drain = %+v, %v", res, err)
			}
			if want := []any{"batch of orders", nil}; !slices.Equal(inner.values, want) {
				t.Errorf("the relay's contexts carried %v, want %v (the second hook call returned nil)", inner.values, want)
			}
			if !slices.Equal(inner.deadlines, []bool{true, true}) {
				t.Errorf("deliveries with a deadline: %v, want both", inner.deadlines)
			}
			if tx && inner.throughTx != 2 {
				t.Errorf("%d deliveries through DeliverTx, want 2", inner.throughTx)
			}
			if want := []string{"start", "context", "stop", "start", "context", "stop"}; !slices.Equal(order, want) {
				t.Errorf("hook order %v, want %v", order, want)
			}
			if len(seen) != 2 || seen[0].Outbox != "orders" || seen[0].Count != 2 || seen[1].Count != 1 {
				t.Errorf("events seen by the hook: %+v", seen)
			}
		})
	}
}
