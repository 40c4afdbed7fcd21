// Package inbox_test tests the inbox against PostgreSQL, MariaDB and SQLite.
package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

func setup(t *testing.T, db *dbtest.DB, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	cfg.DB, cfg.Dialect = db.DB, db.Dialect
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	return in
}

func claim(t *testing.T, in *inbox.Inbox, db *sql.DB, consumer string, m inbox.Message, commit bool) inbox.Outcome {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := in.Claim(ctx, tx, consumer, m)
	if err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestInboxClaim(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{})
		k := core.MessageKey("", "outboxer_messages", 1)
		if o := claim(t, in, db.DB, "billing", inbox.Message{Key: k}, false); o != inbox.Claimed {
			t.Fatalf("first claim: %v", o)
		}
		// The rollback left no record.
		if o := claim(t, in, db.DB, "billing", inbox.Message{Key: k}, true); o != inbox.Claimed {
			t.Fatalf("claim after a rollback: %v", o)
		}
		if o := claim(t, in, db.DB, "billing", inbox.Message{Key: k}, true); o != inbox.Duplicate {
			t.Fatalf("claim after a commit: %v, want duplicate", o)
		}
		if o := claim(t, in, db.DB, "shipping", inbox.Message{Key: k}, true); o != inbox.Claimed {
			t.Fatalf("another consumer: %v", o)
		}
		// Byte for byte: a trailing space makes another key and another consumer.
		if o := claim(t, in, db.DB, "billing", inbox.Message{Key: k + " "}, true); o != inbox.Claimed {
			t.Fatalf("key with a trailing space: %v", o)
		}
		if o := claim(t, in, db.DB, "billing ", inbox.Message{Key: k}, true); o != inbox.Claimed {
			t.Fatalf("consumer with a trailing space: %v", o)
		}
		ctx := context.Background()
		for _, m := range []inbox.Message{{}, {Key: string(make([]byte, 300))}} {
			if _, err := in.Claim(ctx, db.DB, "billing", m); !errors.Is(err, inbox.ErrInvalidMessage) {
				t.Errorf("Claim(%d-byte key) = %v, want ErrInvalidMessage", len(m.Key), err)
			}
		}
	})
}

func effects(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE effects (k VARCHAR(64) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// TestInboxHandle: the handler's writes and the record commit together; a failing
// handler leaves neither, and the redelivery runs it again.
func TestInboxHandle(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{})
		effects(t, db)
		ctx := context.Background()
		k := core.MessageKey("db1", "orders", 7)
		boom := errors.New("boom")
		write := func(fail bool) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
				if _, err := tx.ExecContext(ctx, insertEffect(db), k); err != nil {
					return err
				}
				if fail {
					return boom
				}
				return nil
			}
		}
		if _, err := in.Handle(ctx, "billing", inbox.Message{Key: k}, write(true)); !errors.Is(err, boom) {
			t.Fatalf("failing handler: %v", err)
		}
		for i, want := range []inbox.Outcome{inbox.Claimed, inbox.Duplicate, inbox.Duplicate} {
			o, err := in.Handle(ctx, "billing", inbox.Message{Key: k}, write(false))
			if err != nil || o != want {
				t.Fatalf("delivery %d: %v, %v; want %v", i+2, o, err, want)
			}
		}
		if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// insertEffect is the business write of the tests' handlers.
func insertEffect(db *dbtest.DB) string {
	if db.Dialect == core.Postgres {
		return `INSERT INTO effects (k) VALUES ($1)`
	}
	return `INSERT INTO effects (k) VALUES (?)`
}

func count(t *testing.T, db *dbtest.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInboxRace: a second consumer claiming a key another holds uncommitted waits, then
// skips if the first committed and runs if it rolled back.
func TestInboxRace(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits=%v", commit), func(t *testing.T) {
			dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
				in := setup(t, db, inbox.Config{})
				ctx := context.Background()
				m := inbox.Message{Key: core.MessageKey("", "t", 1)}
				tx1, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if o, err := in.Claim(ctx, tx1, "billing", m); err != nil || o != inbox.Claimed {
					t.Fatalf("first: %v %v", o, err)
				}
				done := make(chan claimResult, 1)
				conn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				id := connID(t, db, conn)
				go func() {
					tx2, err := conn.BeginTx(ctx, nil)
					if err != nil {
						done <- claimResult{err: err}
						return
					}
					o, err := in.Claim(ctx, tx2, "billing", m)
					if err == nil {
						err = tx2.Commit()
					} else {
						tx2.Rollback()
					}
					done <- claimResult{o, err}
				}()
				waitBlocked(t, db, id, done)
				r, want := endFirst(t, tx1, commit, done)
				if r.err != nil || r.o != want {
					t.Fatalf("second: %v %v, want %v", r.o, r.err, want)
				}
			})
		})
	}
}

// TestInboxRacingConsumers: consumers on their own connections handling the same keys
// at once: one effect per key.
func TestInboxRacingConsumers(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{})
		effects(t, db)
		const keys, consumers = 40, 4
		var wg sync.WaitGroup
		errs := make(chan error, consumers)
		for c := 0; c < consumers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < keys; i++ {
					k := core.MessageKey("", "orders", int64(i))
					_, err := in.Handle(context.Background(), "billing", inbox.Message{Key: k}, func(ctx context.Context, tx *sql.Tx, _ inbox.Outcome) error {
						_, err := tx.ExecContext(ctx, insertEffect(db), k)
						return err
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT count(*) FROM effects`); n != keys {
			t.Fatalf("%d effects, want %d", n, keys)
		}
		if n := count(t, db, `SELECT count(DISTINCT k) FROM effects`); n != keys {
			t.Fatalf("%d distinct effects, want %d", n, keys)
		}
	})
}

func TestInboxStaleCheck(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{StaleCheck: true})
		g := inbox.GroupOf("orders", "order:1")
		steps := []struct {
			seq  int64
			grp  string
			want inbox.Outcome
		}{{5, g, inbox.Claimed}, {3, g, inbox.Stale}, {7, g, inbox.Claimed}, {6, g, inbox.Stale}, {1, "", inbox.Claimed}, {2, inbox.GroupOf("orders", "order:2"), inbox.Claimed}}
		for _, s := range steps {
			m := inbox.Message{Key: core.MessageKey("", "orders", s.seq*10+int64(len(s.grp))), Group: s.grp, Seq: s.seq}
			if o := claim(t, in, db.DB, "billing", m, true); o != s.want {
				t.Errorf("seq %d group %q: %v, want %v", s.seq, s.grp, o, s.want)
			}
		}
		// A duplicate is a duplicate before it is stale.
		m := inbox.Message{Key: core.MessageKey("", "orders", 5*10+int64(len(g))), Group: g, Seq: 5}
		if o := claim(t, in, db.DB, "billing", m, true); o != inbox.Duplicate {
			t.Errorf("redelivered seq 5: %v, want duplicate", o)
		}
	})
}

// TestInboxPrune: a record older than the window is pruned, and a redelivery after it
// runs again; one inside the window is still caught.
func TestInboxPrune(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{Window: time.Hour})
		old, recent := inbox.Message{Key: "old"}, inbox.Message{Key: "recent"}
		claim(t, in, db.DB, "billing", old, true)
		claim(t, in, db.DB, "billing", recent, true)
		age := map[core.Dialect]string{
			core.Postgres: `UPDATE outboxer_inbox SET received_at = received_at - interval '2 hours' WHERE msg_key = 'old'`,
			core.MySQL:    `UPDATE outboxer_inbox SET received_at = received_at - INTERVAL 2 HOUR WHERE msg_key = 'old'`,
			core.SQLite:   `UPDATE outboxer_inbox SET received_at = received_at - 7200000000 WHERE msg_key = 'old'`,
		}[db.Dialect]
		if _, err := db.Exec(age); err != nil {
			t.Fatal(err)
		}
		n, err := in.Prune(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("Prune = %d, %v; want 1", n, err)
		}
		if o := claim(t, in, db.DB, "billing", recent, true); o != inbox.Duplicate {
			t.Errorf("redelivery inside the window: %v, want duplicate", o)
		}
		if o := claim(t, in, db.DB, "billing", old, true); o != inbox.Claimed {
			t.Errorf("redelivery after the window: %v, want claimed (documented)", o)
		}
	})
}

func TestInboxConfig(t *testing.T) {
	db := dbtest.SQLite(t)
	_, err := inbox.New(inbox.Config{DB: db.DB, Window: time.Minute, RedeliveryBound: time.Hour})
	var we *inbox.WindowError
	if !errors.Is(err, inbox.ErrWindowTooShort) || !errors.Is(err, core.ErrInvalidConfig) || !errors.As(err, &we) || we.Bound != time.Hour {
		t.Fatalf("window shorter than the bound: %v", err)
	}
	in, err := inbox.New(inbox.Config{DB: db.DB, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.CheckRedelivery("SQS visibility timeout × max receives", 2*time.Hour); !errors.Is(err, inbox.ErrWindowTooShort) {
		t.Fatalf("CheckRedelivery: %v", err)
	}
	for _, c := range []inbox.Config{{}, {DB: db.DB, Table: "bad name"}, {DB: db.DB, Schema: "s"}, {DB: db.DB, Window: -1}} {
		if _, err := inbox.New(c); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	for _, d := range dbtest.Dialects {
		up, down, err := inbox.MigrationSQL(inbox.MigrateOptions{Dialect: d})
		if err != nil || up == "" || down == "" {
			t.Errorf("MigrationSQL(%s): %v", d, err)
		}
	}
}
