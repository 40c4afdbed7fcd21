package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// TestHandleOutlivesTheRollbackDeadlock: two consumers' Handle wait on a key a third
// transaction claimed, which then rolls back. On MariaDB the two waiters both hold a
// shared lock on the key and both want the exclusive one: InnoDB kills one with a
// deadlock (1213). Handle runs that transaction again, so neither consumer sees an
// error (a consumer helper would otherwise stop): one claims, the other finds its
// record, and the effect is written once. Before Handle retried, one of the two
// returned the deadlock.
func TestHandleOutlivesTheRollbackDeadlock(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			for round := range 3 {
				t.Run(fmt.Sprint(round), func(t *testing.T) {
					db := dbtest.Open(t, d)
					in := setup(t, db, inbox.Config{})
					effects(t, db)
					ctx := context.Background()
					key := core.MessageKey("", "orders", 3)
					tx1, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer tx1.Rollback()
					if o, err := in.Claim(ctx, tx1, "billing", inbox.Message{Key: key}); err != nil || o != inbox.Claimed {
						t.Fatalf("first: %v %v", o, err)
					}
					done := make(chan claimResult, 2)
					for range 2 {
						go func() {
							o, err := in.Handle(ctx, "billing", inbox.Message{Key: key}, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
								_, err := tx.ExecContext(ctx, insertEffect(db), key)
								return err
							})
							done <- claimResult{o, err}
						}()
					}
					waitWaiters(t, db, 2, done)
					if err := tx1.Rollback(); err != nil {
						t.Fatal(err)
					}
					outcomes := map[inbox.Outcome]int{}
					for range 2 {
						r := <-done
						if r.err != nil {
							t.Fatalf("a consumer's Handle failed: %v", r.err)
						}
						outcomes[r.o]++
					}
					if outcomes[inbox.Claimed] != 1 || outcomes[inbox.Duplicate] != 1 {
						t.Errorf("outcomes %v, want one claimed and one duplicate", outcomes)
					}
					if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
						t.Fatalf("%d effects, want 1", n)
					}
				})
			}
		})
	}
}

// waitWaiters returns once n sessions wait on the inbox's claim (or fails the test if
// one of them returns first).
func waitWaiters[T any](t *testing.T, db *dbtest.DB, n int, done <-chan T) {
	t.Helper()
	q := map[core.Dialect]string{
		core.Postgres: `SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted`,
		core.MySQL:    `SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND <> 'Sleep' AND INFO LIKE 'INSERT IGNORE%'`,
	}[db.Dialect]
	for deadline := time.Now().Add(30 * time.Second); ; {
		var got int
		if err := db.QueryRow(q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		select {
		case r := <-done:
			t.Fatalf("a consumer returned (%v) while the first claim was open", r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d consumers waiting after 30s", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
