package adaptertest

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// benchCommitEvery bounds the transactions of the benchmarks.
const benchCommitEvery = 200

// Bench measures one Publish inside an open transaction, through the core with a *sql.Tx
// ("core") and through the adapter in the ORM's transaction ("adapter"), on the same
// database in the same run, for PostgreSQL and SQLite (where the adapter runs). The
// transaction is committed every 200 publishes, outside the timer.
func Bench(b *testing.B, a Adapter) {
	for _, d := range []core.Dialect{core.Postgres, core.SQLite} {
		if !slices.Contains(dialects(a), d) {
			continue
		}
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d)
			e := Setup(b, db, nil)
			orm := a.Open(b, db)
			ctx := context.Background()
			msg := Event{OrderID: 42, Note: "placed", Group: "order:42"}
			b.Run("core", func(b *testing.B) {
				var tx *sql.Tx
				begin := func() {
					var err error
					if tx, err = db.BeginTx(ctx, nil); err != nil {
						b.Fatal(err)
					}
				}
				begin()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := e.Ob.Publish(ctx, tx, msg); err != nil {
						b.Fatal(err)
					}
					if (i+1)%benchCommitEvery == 0 {
						b.StopTimer()
						if err := tx.Commit(); err != nil {
							b.Fatal(err)
						}
						begin()
						b.StartTimer()
					}
				}
				b.StopTimer()
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			})
			b.Run("adapter", func(b *testing.B) {
				var tx OpenTx
				begin := func() {
					var err error
					if tx, err = orm.Begin(ctx, e.Ob); err != nil {
						b.Fatal(err)
					}
				}
				begin()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := tx.Publish(ctx, msg); err != nil {
						b.Fatal(err)
					}
					if (i+1)%benchCommitEvery == 0 {
						b.StopTimer()
						if err := tx.Commit(ctx); err != nil {
							b.Fatal(err)
						}
						begin()
						b.StartTimer()
					}
				}
				b.StopTimer()
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
