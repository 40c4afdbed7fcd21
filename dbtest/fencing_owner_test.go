package dbtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestFencingNeedsTheOwnerToo: a lease token alone does not name an owner. Lease rows are
// deleted when the partition count goes down and created again, with token 0, when it
// goes up; another node taking the new row as many times as a frozen node had taken the
// old one holds the frozen node's token. The frozen node, woken, must not confirm its
// batch under the other node's lease: here the partition is given, while the first
// node's relay hangs, to another owner with the first node's very token. The first
// node's confirmation must fail with ErrLeaseLost and leave its message pending for the
// owner.
func TestFencingNeedsTheOwnerToo(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		inside, release := make(chan struct{}), make(chan struct{})
		relay := core.RelayFunc(func(context.Context, []core.Envelope) error {
			close(inside)
			<-release // hangs past its context, as a frozen process does
			return nil
		})
		ended := make(chan error, 1)
		ob := setup(t, db, core.Config{LeaseDuration: time.Second,
			Hooks: core.Hooks{
				OnBatchStop:      func(core.BatchEvent) { ended <- nil },
				OnBatchException: func(ev core.BatchEvent) { ended <- ev.Err },
			},
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, PollInterval: 10 * time.Millisecond}}})
		publish(t, ob, db.DB, event{Seq: 1})
		run(t, ob)
		select {
		case <-inside:
		case <-time.After(30 * time.Second):
			t.Fatal("the message was never handed to the relay")
		}
		var token int64
		if err := db.QueryRow(`SELECT token FROM outboxer_messages_leases WHERE outbox = 'orders' AND part = 0`).Scan(&token); err != nil {
			t.Fatal(err)
		}
		far := map[core.Dialect]string{
			core.Postgres: `now() + interval '1 hour'`,
			core.MySQL:    `UTC_TIMESTAMP(6) + INTERVAL 1 HOUR`,
			core.SQLite:   `CAST(unixepoch('subsec') * 1000000 AS INTEGER) + 3600000000`,
		}[db.Dialect]
		q := fmt.Sprintf(`UPDATE outboxer_messages_leases SET owner = 'other@node/1/abcd', token = %d, expires_at = %s WHERE outbox = 'orders' AND part = 0`, token, far)
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
		close(release)
		select {
		case err := <-ended:
			if !errors.Is(err, core.ErrLeaseLost) {
				t.Fatalf("the woken node's batch ended with %v, want ErrLeaseLost", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the woken node's batch never ended")
		}
		if c := counts(t, ob, "orders"); c.Pending != 1 {
			t.Fatalf("counts %+v: the woken node confirmed its message under another owner's lease", c)
		}
	})
}
