package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// BenchmarkPublish measures what publishing adds to a business transaction (BEGIN; INSERT
// an order; …; COMMIT), against the same transaction alone and with a hand-written INSERT
// of an equivalent outbox row, all in the same run:
//
//	go test -run '^$' -bench Publish -benchtime 2000x ./dbtest
func BenchmarkPublish(b *testing.B) {
	for _, d := range []core.Dialect{core.Postgres, core.SQLite} {
		db := dbtest.Open(b, d)
		ctx := context.Background()
		ob := setup(b, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		if _, err := db.ExecContext(ctx, `CREATE TABLE shop_orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		order := placeholders(d, `INSERT INTO shop_orders (id, total) VALUES (?, ?)`)
		plain := placeholders(d, `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES (?, ?, ?, ?, ?, ?)`)
		payload := []byte(`{"seq":1}`)
		id := 0
		tx := func(b *testing.B, publish func(tx *sql.Tx) error) {
			for b.Loop() {
				id++
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, order, id, 100); err != nil {
					b.Fatal(err)
				}
				if err := publish(tx); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		ten := make([]core.Message, 10)
		for i := range ten {
			ten[i] = event{Seq: i, Group: "order:1"}
		}
		b.Run(string(d)+"/bare", func(b *testing.B) { tx(b, func(*sql.Tx) error { return nil }) })
		b.Run(string(d)+"/plain-insert", func(b *testing.B) {
			tx(b, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, plain, "orders", "test.Event", "order:1", 0, payload, nil)
				return err
			})
		})
		b.Run(string(d)+"/plain-insert-returning", func(b *testing.B) {
			tx(b, func(tx *sql.Tx) error {
				var id int64
				return tx.QueryRowContext(ctx, plain+` RETURNING id`, "orders", "test.Event", "order:1", 0, payload, nil).Scan(&id)
			})
		})
		b.Run(string(d)+"/publish-1", func(b *testing.B) {
			tx(b, func(tx *sql.Tx) error { _, err := ob.Publish(ctx, tx, event{Seq: 1, Group: "order:1"}); return err })
		})
		b.Run(string(d)+"/publish-all-10", func(b *testing.B) {
			tx(b, func(tx *sql.Tx) error { _, err := ob.PublishAll(ctx, tx, ten); return err })
		})
	}
}

// BenchmarkPublishInterleaved measures the same transactions as BenchmarkPublish, timed
// in turn by dbtest.Interleave, and reports medians: what each variant adds to the bare
// transaction, in µs, and the ratios the targets speak of (publish1/plain,
// publish10/publish1), beside the same ratios of two hand-written references: an INSERT
// … RETURNING read back through QueryContext (returning/plain: what reading IDs back
// costs any publish) and one INSERT of ten rows (plain10/plain: what nine more rows cost
// the database). own-work-µs is Publish through an executor that stores nothing: its
// validating, encoding and statement building where they run, between two round trips.
//
//	go test -run '^$' -bench PublishInterleaved -benchtime 3000x ./dbtest
func BenchmarkPublishInterleaved(b *testing.B) {
	for _, d := range []core.Dialect{core.Postgres, core.SQLite} {
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d)
			ctx := context.Background()
			ob := setup(b, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
			if _, err := db.ExecContext(ctx, `CREATE TABLE shop_orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			order := `INSERT INTO shop_orders (id, total) VALUES (?, ?)`
			// values returns the VALUES list of n outbox rows, and their arguments.
			values := func(n int) (string, []any) {
				var b strings.Builder
				var args []any
				for i := range n {
					if i > 0 {
						b.WriteString(", ")
					}
					b.WriteString("(?, ?, ?, ?, ?, ?)")
					args = append(args, "orders", "test.Event", "order:1", 0, fmt.Appendf(nil, `{"seq":%d}`, i), nil)
				}
				return b.String(), args
			}
			rows1, args1 := values(1)
			rows10, args10 := values(10)
			plain := `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES ` + rows1
			returning := plain + ` RETURNING id, created_at`
			plain10 := `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES ` + rows10
			order, plain, returning, plain10 = placeholders(d, order), placeholders(d, plain), placeholders(d, returning), placeholders(d, plain10)
			ten := make([]core.Message, 10)
			for i := range ten {
				ten[i] = event{Seq: i, Group: "order:1"}
			}
			variants := []struct {
				name    string
				publish func(tx *sql.Tx) error
			}{
				{"bare", func(*sql.Tx) error { return nil }},
				{"plain-insert", func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, plain, args1...)
					return err
				}},
				{"publish-1", func(tx *sql.Tx) error { _, err := ob.Publish(ctx, tx, event{Seq: 1, Group: "order:1"}); return err }},
				{"publish-all-10", func(tx *sql.Tx) error { _, err := ob.PublishAll(ctx, tx, ten); return err }},
				// References: the same row inserted by hand and its ID read back, which any
				// publish that returns IDs does; and ten rows inserted by hand in one statement.
				{"insert-returning", func(tx *sql.Tx) error {
					var id int64
					var created any
					return tx.QueryRowContext(ctx, returning, args1...).Scan(&id, &created)
				}},
				{"plain-insert-10", func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, plain10, args10...)
					return err
				}},
				// Publish's own work (validating, encoding, building the statement) where
				// it runs, between two round trips: through an executor that stores nothing.
				{"publish-1-discarded", func(*sql.Tx) error {
					_, err := ob.Publish(ctx, discard{}, event{Seq: 1, Group: "order:1"})
					return err
				}},
			}
			id := 0
			runs := make([]func() error, len(variants))
			for v := range variants {
				runs[v] = func() error {
					id++
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					if _, err := tx.ExecContext(ctx, order, id, 100); err != nil {
						return err
					}
					if err := variants[v].publish(tx); err != nil {
						return fmt.Errorf("%s: %w", variants[v].name, err)
					}
					return tx.Commit()
				}
			}
			med := dbtest.Interleave(b, runs...)
			dbtest.ReportPublish(b, med)
			b.ReportMetric(dbtest.Micros(med[6]-med[0]), "own-work-µs")
		})
	}
}

// BenchmarkPublishMariaDBInterpolated measures, on MariaDB, what one Publish adds to a
// business transaction through go-sql-driver/mysql with its default DSN (a statement with
// arguments is prepared, executed and closed: two round trips) and with
// interpolateParams=true (the driver writes the arguments into the statement: one round
// trip), the variants timed in turn:
//
//	go test -run '^$' -bench PublishMariaDBInterpolated -benchtime 2000x ./dbtest
func BenchmarkPublishMariaDBInterpolated(b *testing.B) {
	db := dbtest.MariaDB(b)
	ctx := context.Background()
	ob := setup(b, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	interpolated := db.Interpolating(b)
	if _, err := db.ExecContext(ctx, `CREATE TABLE shop_orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	id := 0
	order := func(h *sql.DB, publish bool) func() error {
		return func() error {
			id++
			tx, err := h.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO shop_orders (id, total) VALUES (?, ?)`, id, 100); err != nil {
				return err
			}
			if publish {
				if _, err := ob.Publish(ctx, tx, event{Seq: id, Group: "order:1"}); err != nil {
					return err
				}
			}
			return tx.Commit()
		}
	}
	med := dbtest.Interleave(b, order(db.DB, false), order(db.DB, true), order(interpolated, false), order(interpolated, true))
	b.ReportMetric(dbtest.Micros(med[0]), "bare-µs")
	b.ReportMetric(dbtest.Micros(med[1]-med[0]), "publish-added-µs")
	b.ReportMetric(dbtest.Micros(med[2]), "interpolated-bare-µs")
	b.ReportMetric(dbtest.Micros(med[3]-med[2]), "interpolated-publish-added-µs")
	b.ReportMetric(float64(med[3]-med[2])/float64(med[1]-med[0]), "interpolated/default")
}

// BenchmarkPublishOwnWork measures what Publish does besides the database (validating,
// encoding, building the statement, reading the IDs back), in a tight loop where the
// processor's caches stay warm; BenchmarkPublishInterleaved's own-work-µs is the same
// work between two round trips:
//
//	go test -run '^$' -bench PublishOwnWork -benchmem ./dbtest
func BenchmarkPublishOwnWork(b *testing.B) {
	for _, d := range []core.Dialect{core.Postgres, core.SQLite} {
		b.Run(string(d), func(b *testing.B) {
			ob, err := core.New(core.Config{DB: new(sql.DB), Dialect: d, PublishOnly: true,
				Outboxes: map[string]core.OutboxConfig{"orders": {}}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ob.Publish(ctx, discard{}, event{Seq: 1, Group: "order:1"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discard is an executor inside a transaction that stores nothing: each statement
// affects no rows it can count, and every row read back has ID 1 and the time now.
type discard struct{}

func (discard) InTransaction() bool { return true }

func (discard) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return discardResult{}, nil
}

func (discard) QueryRows(_ context.Context, _ string, _ []any, each func(scan func(dest ...any) error) error) error {
	return each(func(dest ...any) error {
		*dest[0].(*int64) = 1
		for _, d := range dest[1:] {
			if err := d.(sql.Scanner).Scan(time.Now()); err != nil {
				return err
			}
		}
		return nil
	})
}

type discardResult struct{}

func (discardResult) LastInsertId() (int64, error) { return 1, nil }
func (discardResult) RowsAffected() (int64, error) {
	return 0, errors.New("discard: rows are not counted")
}

// BenchmarkDrain drains a backlog with a no-op relay through the engine and through a
// plain SQL loop (BEGIN; SELECT … FOR UPDATE; DELETE; COMMIT) on the same table:
//
//	go test -run '^$' -bench Drain -benchtime 3x ./dbtest
func BenchmarkDrain(b *testing.B) {
	const backlog = 20000
	for _, d := range []core.Dialect{core.Postgres, core.SQLite} {
		for _, batch := range []int{100, 1000} {
			db := dbtest.Open(b, d)
			ctx := context.Background()
			ob := setup(b, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }), BatchSize: batch,
			}}})
			fill := func(b *testing.B) {
				b.StopTimer()
				msgs := make([]core.Message, 1000)
				for i := range msgs {
					msgs[i] = core.Raw{To: "orders", Type: "t", Key: fmt.Sprint("g", i%16), Data: []byte(strings.Repeat("x", 256))}
				}
				for range backlog / 1000 {
					publish(b, ob, db.DB, msgs...)
				}
				if d == core.Postgres {
					_, _ = db.ExecContext(ctx, `VACUUM ANALYZE outboxer_messages`)
				}
				b.StartTimer()
			}
			name := fmt.Sprintf("%s/batch-%d", d, batch)
			b.Run(name+"/engine", func(b *testing.B) {
				for b.Loop() {
					fill(b)
					res, err := ob.Drain(ctx, "orders")
					if err != nil || res.Delivered != backlog {
						b.Fatalf("Drain = %+v, %v", res, err)
					}
				}
				b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "msg/s")
			})
			b.Run(name+"/plain-loop", func(b *testing.B) {
				sel := `SELECT id, payload FROM outboxer_messages WHERE outbox = 'orders' AND part = 0 AND state = 0 ORDER BY id LIMIT ` + fmt.Sprint(batch)
				if d == core.Postgres {
					sel += ` FOR UPDATE`
				}
				for b.Loop() {
					fill(b)
					for {
						n, err := plainBatch(ctx, db, sel)
						if err != nil {
							b.Fatal(err)
						}
						if n == 0 {
							break
						}
					}
				}
				b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "msg/s")
			})
		}
	}
	_ = time.Second
}

func plainBatch(ctx context.Context, db *dbtest.DB, sel string) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, sel)
	if err != nil {
		return 0, err
	}
	var ids []string
	for rows.Next() {
		var id int64
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			return 0, err
		}
		ids = append(ids, fmt.Sprint(id))
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM outboxer_messages WHERE id IN (`+strings.Join(ids, ",")+`)`); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit()
}
