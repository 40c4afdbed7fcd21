package dbtest_test

import (
	"context"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Discard and RetryDead take any number of IDs: more than a statement can have
// placeholders (65,535 on PostgreSQL and MariaDB, 32,766 on SQLite).
func TestAdminTakesManyIDs(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Manual: true})
		envs := publish(t, ob, db.DB, event{Seq: 1}, event{Seq: 2}, event{Seq: 3})
		ids := make([]int64, 0, 70_002)
		for i := range int64(70_000) {
			ids = append(ids, envs[2].ID+1+i) // none of these exists
		}
		ids = append(ids, envs[0].ID, envs[2].ID)
		if n, err := ob.RetryDead(ctx, "orders", ids...); err != nil || n != 0 {
			t.Fatalf("RetryDead of %d IDs, none dead: %d, %v", len(ids), n, err)
		}
		if n, err := ob.Discard(ctx, "orders", ids...); err != nil || n != 2 {
			t.Fatalf("Discard of %d IDs, two of them stored: %d, %v", len(ids), n, err)
		}
		left, err := ob.ListPending(ctx, "orders", 0)
		if err != nil || len(left) != 1 || left[0].ID != envs[1].ID {
			t.Fatalf("pending after Discard: %+v, %v; want message %d alone", left, err, envs[1].ID)
		}
	})
}
