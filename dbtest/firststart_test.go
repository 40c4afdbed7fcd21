package dbtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestRelaysStartingTogetherOnANewOutbox: three relay instances with the same
// configuration start at the same moment on an outbox that has never run but already
// holds messages (a deploy of several replicas at once). None may be refused as if the
// partitions had changed (one counting the lease rows while another creates them), and
// every message is delivered once.
func TestRelaysStartingTogetherOnANewOutbox(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		for round := range 3 {
			t.Run(fmt.Sprint(round), func(t *testing.T) {
				table := fmt.Sprintf("together_%d", round)
				rec := &recorder{}
				cfg := core.Config{Table: table, LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
					Relay: rec, Partitions: 4, PollInterval: 20 * time.Millisecond}}}
				pub := setup(t, db, cfg)
				var msgs []core.Message
				for i := range 40 {
					msgs = append(msgs, event{Seq: i, Group: fmt.Sprint("g", i%8)})
				}
				publish(t, pub, db.DB, msgs...)
				obs := make([]*core.Outboxer, 3)
				for i := range obs {
					c := cfg
					c.Name = fmt.Sprint("replica", i)
					obs[i] = setup(t, db, c)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				start := make(chan struct{})
				errs := make(chan error, len(obs))
				var wg sync.WaitGroup
				for _, ob := range obs {
					wg.Go(func() {
						<-start
						errs <- ob.Run(ctx)
					})
				}
				close(start)
				eventually(t, 30*time.Second, "every message delivered", func() bool {
					select {
					case err := <-errs:
						t.Fatalf("a replica's Run returned while the others run: %v", err)
					default:
					}
					return len(rec.delivered()) >= len(msgs)
				})
				cancel()
				wg.Wait()
				seen := map[int64]bool{}
				for _, e := range rec.delivered() {
					if seen[e.ID] {
						t.Errorf("message %d delivered twice", e.ID)
					}
					seen[e.ID] = true
				}
				close(errs)
				for err := range errs {
					if err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("Run: %v", err)
					}
				}
			})
		}
	})
}
