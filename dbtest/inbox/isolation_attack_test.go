package inbox_test

// Attacks on the racing-consumers promise at every isolation level: two consumers
// claiming one key, the second while the first's transaction is open. Whatever the
// level, the handler must run to a commit exactly once; where the database cannot make
// the second wait and decide (PostgreSQL at REPEATABLE READ and SERIALIZABLE), the
// second must fail with a serialization error a retry turns into Duplicate.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

var levels = []sql.IsolationLevel{sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}

// serializationFailure: PostgreSQL's 40001, the error its documentation says to retry.
func serializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40001"
}

// connID returns the server's id of conn's session.
func connID(t *testing.T, db *dbtest.DB, conn *sql.Conn) int64 {
	t.Helper()
	var id int64
	if db.Dialect == core.SQLite {
		return 0 // one process: no sessions to tell apart
	}
	q := `SELECT CONNECTION_ID()`
	if db.Dialect == core.Postgres {
		q = `SELECT pg_backend_pid()`
	}
	if err := conn.QueryRowContext(context.Background(), q).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// claimResult is what a claim running in another goroutine returned.
type claimResult struct {
	o   inbox.Outcome
	err error
}

// endFirst commits or rolls back the first claim's transaction and returns what the
// second claim, waiting for it, got, and what it should get: Duplicate after a commit,
// Claimed after a rollback.
func endFirst(t *testing.T, tx1 *sql.Tx, commit bool, second <-chan claimResult) (got claimResult, want inbox.Outcome) {
	t.Helper()
	end, want := tx1.Commit, inbox.Duplicate
	if !commit {
		end, want = tx1.Rollback, inbox.Claimed
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	return <-second, want
}

// waitBlocked returns once session id waits for a lock (or its claim's INSERT is still
// running on MariaDB), or fails the test if done delivers first.
func waitBlocked[T any](t *testing.T, db *dbtest.DB, id int64, done <-chan T) {
	t.Helper()
	q := map[core.Dialect]string{
		core.Postgres: `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`,
		core.MySQL:    `SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND COMMAND <> 'Sleep' AND INFO LIKE 'INSERT IGNORE%'`,
	}[db.Dialect]
	if q == "" {
		return // SQLite: the second waits at BEGIN IMMEDIATE, which the database does not show
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := db.QueryRow(q, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case r := <-done:
			t.Fatalf("the second claim returned (%v) while the first was open", r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second claim never waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// handleAt is Inbox.Handle at an isolation level: claim, write the effect, commit.
func handleAt(ctx context.Context, in *inbox.Inbox, db *dbtest.DB, conn *sql.Conn, level sql.IsolationLevel, key string) (inbox.Outcome, error) {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	o, err := in.Claim(ctx, tx, "billing", inbox.Message{Key: key})
	if err != nil || o == inbox.Duplicate {
		return o, err
	}
	if _, err := tx.ExecContext(ctx, insertEffect(db), key); err != nil {
		return 0, err
	}
	return o, tx.Commit()
}

// TestAttackIsolationLevels: on PostgreSQL and MariaDB, both consumers' transactions at
// each isolation level; the first commits or rolls back while the second waits on the
// key.
func TestAttackIsolationLevels(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		for _, level := range levels {
			for _, commit := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%v/first commits=%v", d, level, commit), func(t *testing.T) {
					isolationRace(t, dbtest.Open(t, d), level, commit)
				})
			}
		}
	}
}

func isolationRace(t *testing.T, db *dbtest.DB, level sql.IsolationLevel, commit bool) {
	in := setup(t, db, inbox.Config{})
	effects(t, db)
	ctx := context.Background()
	key := core.MessageKey("", "orders", 1)
	c1, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	tx1, err := c1.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	if o, err := in.Claim(ctx, tx1, "billing", inbox.Message{Key: key}); err != nil || o != inbox.Claimed {
		t.Fatalf("first: %v %v", o, err)
	}
	if _, err := tx1.ExecContext(ctx, insertEffect(db), key); err != nil {
		t.Fatal(err)
	}
	done := make(chan claimResult, 1)
	id := connID(t, db, c2)
	go func() {
		o, err := handleAt(ctx, in, db, c2, level, key)
		done <- claimResult{o, err}
	}()
	waitBlocked(t, db, id, done)
	r, want := endFirst(t, tx1, commit, done)
	switch {
	case r.err == nil && r.o == want:
	case r.err != nil && serializationFailure(r.err) && db.Dialect == core.Postgres && level >= sql.LevelRepeatableRead:
		// Documented: retried, the transaction finds the first's record.
		t.Logf("second: %v (retried)", r.err)
		if o, err := handleAt(ctx, in, db, c2, level, key); err != nil || o != want {
			t.Fatalf("second, retried: %v %v, want %v", o, err, want)
		}
	default:
		t.Fatalf("second: %v %v, want %v", r.o, r.err, want)
	}
	if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// TestAttackThreeRacersFirstRollsBack: two consumers wait on a third's uncommitted
// claim of a key, which then rolls back: exactly one of the two runs the handler. On
// MariaDB the two waiters both hold a shared lock on the key when the first rolls back
// and both want the exclusive one, the deadlock InnoDB's manual shows for three
// sessions inserting one key; the loser's error is a deadlock (retryable: a retry
// finds the winner's record), never a second effect.
func TestAttackThreeRacersFirstRollsBack(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
			t.Run(fmt.Sprintf("%s/%v", d, level), func(t *testing.T) {
				db := dbtest.Open(t, d)
				in := setup(t, db, inbox.Config{})
				effects(t, db)
				ctx := context.Background()
				key := core.MessageKey("", "orders", 3)
				conns := make([]*sql.Conn, 3)
				for i := range conns {
					c, err := db.Conn(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					conns[i] = c
				}
				tx1, err := conns[0].BeginTx(ctx, &sql.TxOptions{Isolation: level})
				if err != nil {
					t.Fatal(err)
				}
				if o, err := in.Claim(ctx, tx1, "billing", inbox.Message{Key: key}); err != nil || o != inbox.Claimed {
					t.Fatalf("first: %v %v", o, err)
				}
				done := make(chan claimResult, 2)
				ids := []int64{connID(t, db, conns[1]), connID(t, db, conns[2])}
				for _, c := range conns[1:] {
					go func() {
						o, err := handleAt(ctx, in, db, c, level, key)
						done <- claimResult{o, err}
					}()
				}
				for _, id := range ids {
					waitBlocked(t, db, id, done)
				}
				if err := tx1.Rollback(); err != nil {
					t.Fatal(err)
				}
				outcomes := map[inbox.Outcome]int{}
				for range 2 {
					r := <-done
					switch {
					case r.err == nil:
						outcomes[r.o]++
					case retryable(db, r.err):
						t.Logf("a waiter failed: %v", r.err)
						c, err := db.Conn(ctx) // the others' connections may still be busy
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						o, err := handleAt(ctx, in, db, c, level, key)
						if err != nil {
							t.Fatalf("retried: %v", err)
						}
						outcomes[o]++
					default:
						t.Fatalf("a waiter: %v", r.err)
					}
				}
				if outcomes[inbox.Claimed] != 1 || outcomes[inbox.Duplicate] != 1 {
					t.Errorf("outcomes %v, want one claimed and one duplicate", outcomes)
				}
				if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
					t.Fatalf("%d effects, want 1", n)
				}
			})
		}
	}
}

// retryable: a serialization failure (PostgreSQL) or a deadlock (MariaDB, 1213).
func retryable(db *dbtest.DB, err error) bool {
	if db.Dialect == core.Postgres {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// TestAttackSQLiteConnections: consumers on several connections of a SQLite file, and on
// handles of their own (as separate programs would have), with the recommended DSN and
// with deferred transactions (SQLite's default): one effect per key, whatever waited.
func TestAttackSQLiteConnections(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(string) string
	}{
		{"immediate", dbtest.SQLiteDSN},
		{"deferred", func(p string) string {
			return "file:" + filepath.ToSlash(p) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "consumer.db")
			const keys, consumers = 60, 4
			var dbs []*dbtest.DB
			for range consumers {
				h, err := sql.Open("sqlite", tc.dsn(path))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h.Close() })
				h.SetMaxOpenConns(2)
				dbs = append(dbs, &dbtest.DB{DB: h, Dialect: core.SQLite})
			}
			setup(t, dbs[0], inbox.Config{})
			effects(t, dbs[0])
			var wg sync.WaitGroup
			errs := make(chan error, consumers*2)
			for c := range consumers * 2 {
				db := dbs[c%consumers]
				in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: core.SQLite})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range keys {
						k := core.MessageKey("", "orders", int64((i+c*7)%keys))
						_, err := in.Handle(context.Background(), "billing", inbox.Message{Key: k}, func(ctx context.Context, tx *sql.Tx, _ inbox.Outcome) error {
							_, err := tx.ExecContext(ctx, insertEffect(db), k)
							return err
						})
						if err != nil {
							errs <- fmt.Errorf("consumer %d, key %d: %w", c, i, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := count(t, dbs[0], `SELECT count(*) FROM effects`); n != keys {
				t.Errorf("%d effects, want %d", n, keys)
			}
			if n := count(t, dbs[0], `SELECT count(DISTINCT k) FROM effects`); n != keys {
				t.Errorf("%d distinct effects, want %d", n, keys)
			}
		})
	}
}
