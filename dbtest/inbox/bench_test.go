package inbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// BenchmarkClaim compares, in one run and interleaved, a transaction holding the
// inbox's Claim with one holding the hand-written statement of the same row
// (INSERT … ON CONFLICT DO NOTHING; MariaDB: INSERT IGNORE). Report the ratio of the
// two sub-benchmarks.
func BenchmarkClaim(b *testing.B) {
	for _, d := range dbtest.Dialects {
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d)
			ctx := context.Background()
			in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: d})
			if err != nil {
				b.Fatal(err)
			}
			if err := in.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			if err := inbox.Migrate(ctx, db.DB, inbox.MigrateOptions{Dialect: d, Table: "plain_inbox"}); err != nil {
				b.Fatal(err)
			}
			plain := map[core.Dialect]string{
				core.Postgres: `INSERT INTO plain_inbox (consumer, msg_key, received_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`,
				core.MySQL:    `INSERT IGNORE INTO plain_inbox (consumer, msg_key, received_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
				core.SQLite:   `INSERT INTO plain_inbox (consumer, msg_key, received_at) VALUES (?, ?, CAST(unixepoch('subsec') * 1000000 AS INTEGER)) ON CONFLICT DO NOTHING`,
			}[d]
			var ni, np int
			step := func(b *testing.B, useInbox bool, i int) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				key := strconv.Itoa(i)
				if useInbox {
					_, err = in.Claim(ctx, tx, "billing", inbox.Message{Key: key})
				} else {
					_, err = tx.ExecContext(ctx, plain, "billing", key)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			// Interleaved: each sub-benchmark's round alternates with the other's.
			for round := 0; round < 3; round++ {
				b.Run("inbox", func(b *testing.B) {
					for b.Loop() {
						ni++
						step(b, true, ni)
					}
				})
				b.Run("plain", func(b *testing.B) {
					for b.Loop() {
						np++
						step(b, false, np)
					}
				})
			}
		})
	}
}
