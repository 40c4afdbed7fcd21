package dbtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// WithDelay counts from the insert, not from the start of its transaction (PostgreSQL's
// now()): a transaction open for a second before it publishes does not shorten the delay.
func TestDelayCountsFromTheInsert(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Manual: true})
		tx, err := db.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil { // the transaction has begun
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the open transaction is what is tested, not a wait for something
		before := time.Now()
		env, err := ob.Publish(ctx, tx, event{Seq: 1}, core.WithDelay(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// The database runs on this host: its clock is this process's, to the millisecond.
		if early := before.Add(2 * time.Second).Sub(env.AvailableAt); early > 50*time.Millisecond {
			t.Errorf("available at %v, %v before publish time + delay", env.AvailableAt, early)
		}
	})
}
