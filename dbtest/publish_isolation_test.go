package dbtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// serializable returns db seen through another handle whose sessions default to
// SERIALIZABLE (set per connection, the server's default is left alone), and checks that
// they do. SQLite, whose transactions are always serializable and cannot fail for it,
// skips.
func serializable(t *testing.T, db *dbtest.DB) *dbtest.DB {
	t.Helper()
	var dsn, check string
	switch db.Dialect {
	case core.Postgres:
		u, err := url.Parse(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("default_transaction_isolation", "serializable")
		u.RawQuery = q.Encode()
		dsn, check = u.String(), `SHOW transaction_isolation`
	case core.MySQL:
		cfg, err := mysql.ParseDSN(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["tx_isolation"] = "'SERIALIZABLE'"
		dsn, check = cfg.FormatDSN(), `SELECT @@tx_isolation`
	default:
		t.Skipf("%s has no isolation levels", db.Dialect)
	}
	strict, err := sql.Open(db.Driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { strict.Close() })
	var level string
	if err := strict.QueryRowContext(context.Background(), check).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if l := strings.ToLower(level); l != "serializable" {
		t.Fatalf("the pool's default is %q, want serializable", level)
	}
	h := *db
	h.DB, h.DSN = strict, dsn
	return &h
}

// A transaction that only publishes, at SERIALIZABLE, commits although the relay works on
// the same outbox while it is open: nothing the engine reads in it is what the relay
// writes, and nothing the relay reads at the pool's default is what it writes. Each round
// opens a transaction on a publisher that has not read the outbox's shape yet and
// publishes; the relay, idle, renews its lease, then sweeps its outbox for messages beyond
// its partitions; the transaction publishes again and commits. (Had the publish read the
// lease rows in the transaction, the renewal would wait on it on MariaDB, and PostgreSQL
// would fail the transaction: the sweep read what it wrote, it read what the renewal
// wrote, and the renewal committed first.)
func TestPublishInSerializableTransactionWhileRelaysWork(t *testing.T) {
	t.Parallel()
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := dbtest.Open(t, d)
			strict := serializable(t, db)
			ctx := context.Background()
			// Migrated, and counted through a handle at the server's default.
			admin := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
			// What the relay has done since the test armed the watch: 1 a lease renewal
			// sent, 2 it came back (the worker reads its lease next), 3 a sweep for
			// messages beyond the partitions sent, 4 it came back (any statement after).
			var armed atomic.Bool
			var stage atomic.Int32
			hooked := dbtest.Hooked(t, strict, func(_ context.Context, s dbtest.Statement) {
				if !armed.Load() {
					return
				}
				switch q := s.Query; {
				case stage.Load() == 0 && s.Exec && strings.Contains(q, "SET expires_at"):
					stage.Store(1)
				case stage.Load() == 1 && strings.Contains(q, "SELECT token, paused"):
					stage.Store(2)
				case stage.Load() == 2 && strings.Contains(q, "ORDER BY id LIMIT 1000"):
					stage.Store(3)
				case stage.Load() == 3:
					stage.Store(4)
				}
			})
			rec := &recorder{}
			relay, err := core.New(core.Config{DB: hooked.DB, Logger: quiet, LeaseDuration: 2 * time.Second,
				Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 2, PollInterval: 5 * time.Millisecond}}})
			if err != nil {
				t.Fatal(err)
			}
			run(t, relay)
			seq := 0
			next := func() core.Message { seq++; return event{Seq: seq, Group: fmt.Sprint("g", seq%2)} }
			// Once the lease rows are there, and a first message delivered.
			publish(t, relay, strict, next())
			eventually(t, 20*time.Second, "the first message delivered", func() bool { return counts(t, admin, "orders").Pending == 0 })
			const rounds = 5
			for round := range rounds {
				pub, err := core.New(core.Config{DB: strict.DB, Logger: quiet, PublishOnly: true,
					Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 2}}})
				if err != nil {
					t.Fatal(err)
				}
				tx, err := strict.BeginTx(ctx, nil) // the pool's default: serializable
				if err != nil {
					t.Fatal(err)
				}
				if _, err := pub.Publish(ctx, tx, next()); err != nil {
					tx.Rollback()
					t.Fatalf("round %d: first publish: %v", round, err)
				}
				stage.Store(0)
				armed.Store(true)
				for deadline := time.Now().Add(10 * time.Second); stage.Load() < 4; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						tx.Rollback()
						t.Fatalf("round %d: the relay did not renew its lease and sweep in 10 s while a publishing transaction was open (stage %d of 4)",
							round, stage.Load())
					}
				}
				armed.Store(false)
				if _, err := pub.Publish(ctx, tx, next()); err != nil {
					tx.Rollback()
					t.Fatalf("round %d: second publish: %v", round, err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatalf("round %d: commit: %v", round, err)
				}
			}
			eventually(t, 20*time.Second, "every message delivered", func() bool { return counts(t, admin, "orders").Pending == 0 })
			seen := map[int]int{}
			for _, e := range rec.delivered() {
				var n int
				fmt.Sscanf(string(e.Payload), `{"seq":%d}`, &n)
				seen[n]++
			}
			for s := 1; s <= seq; s++ {
				if seen[s] != 1 {
					t.Fatalf("message %d delivered %d times, want once (of %d)", s, seen[s], seq)
				}
			}
		})
	}
}

// Publishers whose transactions only publish never fail at SERIALIZABLE, however busy the
// relays: 8 publishers, each message in a transaction of its own at the pool's default,
// and 3 relays on the same outbox. Every message is delivered once.
func TestPublishInSerializableTransactionsUnderLoad(t *testing.T) {
	t.Parallel()
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := dbtest.Open(t, d)
			strict := serializable(t, db)
			ctx := context.Background()
			admin := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
			var recs []*recorder
			var relays []*core.Outboxer
			for range 3 {
				rec := &recorder{}
				// Short leases: renewals and sweeps of the lease rows every half second.
				ob, err := core.New(core.Config{DB: strict.DB, Logger: quiet, LeaseDuration: 2 * time.Second,
					Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 6, BatchSize: 20, PollInterval: 5 * time.Millisecond}}})
				if err != nil {
					t.Fatal(err)
				}
				run(t, ob)
				recs, relays = append(recs, rec), append(relays, ob)
			}
			const publishers, per = 8, 400
			var wg sync.WaitGroup
			errs := make(chan error, publishers*per)
			for p := range publishers {
				// Publishers of their own, each reading the shape every time the engine
				// does.
				pub, err := core.New(core.Config{DB: strict.DB, Logger: quiet, PublishOnly: true,
					Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 6}}})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					for i := range per {
						msg := event{Seq: p*per + i, Group: fmt.Sprint("g", i%10)}
						tx, err := strict.BeginTx(ctx, nil)
						if err != nil {
							errs <- err
							return
						}
						if _, err := pub.Publish(ctx, tx, msg); err != nil {
							tx.Rollback()
							errs <- fmt.Errorf("publish %d: %w", msg.Seq, err)
							continue
						}
						if err := tx.Commit(); err != nil {
							errs <- fmt.Errorf("commit %d: %w", msg.Seq, err)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			failed := 0
			var first error
			for err := range errs {
				if first == nil {
					first = err
				}
				failed++
			}
			if failed > 0 {
				t.Fatalf("%d of %d publishing transactions failed (first: %v)", failed, publishers*per, first)
			}
			eventually(t, 60*time.Second, "every message delivered", func() bool { return counts(t, admin, "orders").Pending == 0 })
			seen := map[int64]int{}
			for _, rec := range recs {
				for _, e := range rec.delivered() {
					seen[e.ID]++
				}
			}
			dups := 0
			for _, n := range seen {
				dups += n - 1
			}
			if len(seen) != publishers*per || dups != 0 {
				t.Fatalf("delivered %d distinct of %d, %d duplicates", len(seen), publishers*per, dups)
			}
		})
	}
}

// A publish in a transaction needs no connection besides the transaction's, however small
// the pool: with the only connection held by the transaction, the outbox's shape is read
// through it, and the messages land in the recorded partitions.
func TestPublishInTransactionOnAPoolOfOne(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// The relays recorded 4 partitions; this publisher is configured with 1.
		setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		relay := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 4}}})
		stop := run(t, relay)
		eventually(t, 20*time.Second, "the partitions recorded", func() bool {
			st, err := relay.Status(ctx, "orders")
			return err == nil && len(st) == 4 && st[3].LeaseHeld
		})
		stop()
		db.SetMaxOpenConns(1)
		pub, err := core.New(core.Config{DB: db.DB, Logger: quiet, PublishOnly: true,
			Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			envs, err := pub.PublishAll(ctx, tx, []core.Message{event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "b"}, event{Seq: 3, Group: "c"}})
			if err != nil {
				tx.Rollback()
				t.Fatalf("round %d: publish: %v", round, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("round %d: commit: %v", round, err)
			}
			for _, e := range envs {
				if want := core.PartitionFor(e.GroupKey, 4); e.Partition != want {
					t.Fatalf("round %d: group %q published into partition %d, want %d of the 4 recorded", round, e.GroupKey, e.Partition, want)
				}
			}
		}
	})
}
