package dbtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A lease row locked by another transaction (a holder frozen inside a confirmation, on
// PostgreSQL or MariaDB) is not free, and a node must not wait for it: it takes the other
// free partitions at once. Before, a worker that claimed the node's last place for a
// locked partition waited for the lock (up to its 10 s acquire deadline, again and again)
// while the free partition beside it stayed unowned: in make chaos, a frozen relay held
// up the takeover of its other partitions for more than 30 s on MariaDB.
//
// In each of three rounds the four partitions are held by a node that is gone (its
// leases run out 5 s later); a new node that may hold one of them (MaxPartitions 1)
// starts, and the rows of partitions 0 to 2 are locked before the leases lapse. The node
// must take partition 3 within 8 s of the lapse. (Before, when a locked partition's
// worker claimed the one place first, partition 3 waited at least 10 s.)
func TestNodeDoesNotWaitForALockedLease(t *testing.T) {
	chaosForDialects(t, []core.Dialect{core.Postgres, core.MySQL}, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		leases := core.DefaultTable + "_leases"
		cfg := core.Config{DB: db.DB, Logger: quiet, MaxPartitions: 1, LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: &recorder{}, Partitions: 4, PollInterval: 10 * time.Millisecond,
		}}}
		first := setup(t, db, cfg) // creates the tables; its Run creates the lease rows
		stop := run(t, first)
		eventually(t, 10*time.Second, "a partition taken", func() bool {
			h, err := first.Health(ctx)
			return err == nil && len(h.Outboxes) == 1 && len(h.Outboxes[0].Unowned) == 3
		})
		stop()
		in5s := map[core.Dialect]string{
			core.Postgres: `now() + interval '5 seconds'`,
			core.MySQL:    `UTC_TIMESTAMP(6) + INTERVAL 5 SECOND`,
		}[db.Dialect]

		for round := range 3 {
			if _, err := db.ExecContext(ctx, `UPDATE `+leases+` SET owner = 'gone', token = token + 1, expires_at = `+in5s+` WHERE outbox = 'orders' AND part >= 0`); err != nil {
				t.Fatal(err)
			}
			lapse := time.Now().Add(5 * time.Second)
			ob, err := core.New(cfg) // Run runs once per instance; not migrated again (see below)
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, ob)
			// Once it runs (its start-up locks the lease rows: it would wait for the lock),
			// partition 0's row is locked, as by a holder frozen inside a confirmation.
			eventually(t, 10*time.Second, "the node running", func() bool {
				h, err := ob.Health(ctx)
				return err == nil && len(h.Outboxes) == 1 && len(h.Outboxes[0].Nodes) == 1
			})
			// READ COMMITTED: in MariaDB's REPEATABLE READ a range would lock the next
			// row too.
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE `+leases+` SET token = token WHERE outbox = 'orders' AND part IN (0, 1, 2)`); err != nil {
				t.Fatal(err)
			}
			// Checked once the rows are locked: had the leases run out before, a worker could
			// have taken partition 0 and the test would prove nothing.
			if time.Now().After(lapse) {
				t.Fatalf("round %d: the rows were locked after the leases ran out", round)
			}
			eventually(t, time.Until(lapse)+8*time.Second, fmt.Sprintf("round %d: partition 3 taken while the lease rows of 0 to 2 are locked", round), func() bool {
				return chaosLeases(t, db)[3].owner == ob.Owner()
			})
			for p, l := range chaosLeases(t, db) {
				if p >= 0 && p < 3 && l.owner == ob.Owner() {
					t.Errorf("round %d: partition %d taken while its row was locked", round, p)
				}
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			stop()
		}
	})
}
