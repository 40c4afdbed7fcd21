//go:build attack

package dbtest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A broker that does not answer (every call runs into the delivery timeout) is narrowed
// like one that refuses: each half, each quarter, down to one message, waits out a
// DeliveryTimeout of its own. A batch of n then costs up to 2n-1 timeouts before its
// heads are charged, instead of one: with the defaults (100 messages, 10 s) half an hour
// during which the partition delivers nothing and no OnRetry reports the outage. The
// test wants a batch of 16 with a 100 ms timeout to be over within 4 timeouts.
func TestNarrowingAHungBrokerCostsFewTimeouts(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		const timeout = 100 * time.Millisecond
		var (
			mu    sync.Mutex
			calls []int
		)
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			mu.Lock()
			calls = append(calls, len(batch))
			mu.Unlock()
			<-ctx.Done()
			return ctx.Err()
		})
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, BatchSize: 16, DeliveryTimeout: timeout}}})
		var msgs []core.Message
		for i := range 16 {
			msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i)})
		}
		publish(t, ob, db.DB, msgs...)
		start := time.Now()
		res, err := ob.Drain(context.Background(), "orders")
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("Drain: %+v in %v, %d calls to the relay: %v", res, took.Round(time.Millisecond), len(calls), calls)
		if took > 4*timeout {
			t.Errorf("one batch of 16 against a broker that does not answer took %v (%d delivery timeouts of %v), want at most %v",
				took.Round(time.Millisecond), len(calls), timeout, 4*timeout)
		}
	})
}
