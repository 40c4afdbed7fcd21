package dbtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
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
		ph := func(n int) string {
			if d == core.Postgres {
				return fmt.Sprintf("$%d", n)
			}
			return "?"
		}
		order := `INSERT INTO shop_orders (id, total) VALUES (` + ph(1) + `, ` + ph(2) + `)`
		plain := `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES (` +
			ph(1) + `, ` + ph(2) + `, ` + ph(3) + `, ` + ph(4) + `, ` + ph(5) + `, ` + ph(6) + `)`
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

// BenchmarkPublishInterleaved measures the same transactions as BenchmarkPublish, but
// runs them in turn within every iteration (bare, plain INSERT, Publish, PublishAll of
// 10, in a rotating order) and reports medians. A database's commit time drifts over a
// run (checkpoints, table growth, other load on the machine); taking every variant under
// the same conditions keeps the comparison fair. Reported: the median added by each
// variant over the bare transaction, in µs, and the ratios the targets speak of:
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
			order, plain := `INSERT INTO shop_orders (id, total) VALUES (?, ?)`,
				`INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES (?, ?, ?, ?, ?, ?)`
			if d == core.Postgres {
				order, plain = `INSERT INTO shop_orders (id, total) VALUES ($1, $2)`,
					`INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`
			}
			payload := []byte(`{"seq":1}`)
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
					_, err := tx.ExecContext(ctx, plain, "orders", "test.Event", "order:1", 0, payload, nil)
					return err
				}},
				{"publish-1", func(tx *sql.Tx) error { _, err := ob.Publish(ctx, tx, event{Seq: 1, Group: "order:1"}); return err }},
				{"publish-all-10", func(tx *sql.Tx) error { _, err := ob.PublishAll(ctx, tx, ten); return err }},
			}
			took := make([][]time.Duration, len(variants))
			id, turn := 0, 0
			for b.Loop() {
				turn++
				for k := range variants {
					v := (k + turn) % len(variants)
					id++
					start := time.Now()
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.ExecContext(ctx, order, id, 100); err != nil {
						b.Fatal(err)
					}
					if err := variants[v].publish(tx); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
					took[v] = append(took[v], time.Since(start))
				}
			}
			med := make([]float64, len(variants))
			for v := range variants {
				slices.Sort(took[v])
				med[v] = float64(took[v][len(took[v])/2].Nanoseconds()) / 1e3
			}
			added := func(v int) float64 { return med[v] - med[0] }
			b.ReportMetric(med[0], "bare-µs")
			b.ReportMetric(added(1), "plain-added-µs")
			b.ReportMetric(added(2), "publish1-added-µs")
			b.ReportMetric(added(3), "publish10-added-µs")
			b.ReportMetric(added(2)/added(1), "publish1/plain")
			b.ReportMetric(added(3)/added(2), "publish10/publish1")
		})
	}
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
