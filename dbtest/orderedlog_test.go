package dbtest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestOrderedLogIsReadWhole checks the relay processes' deliveries log as scenario 12
// reads it: by seq, while two partitions append to it. With OrderedLog each row becomes
// visible in seq order, so a reader that moves its position to the last seq it saw
// reads every row. Without it, the reader skipped 20 to 215 of the 8,000 rows on
// PostgreSQL and MariaDB (a batch given lower seqs committing after one given higher
// seqs), and the consumer of scenario 12 once lost a whole batch of 20 that way.
func TestOrderedLogIsReadWhole(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		relayTables(t, db)
		r := &tableRelay{db: db.DB, dialect: db.Dialect, pid: 1, orderedLog: true}
		const writers, batches, n = 2, 200, 20
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for b := range batches {
					batch := make([]core.Envelope, n)
					for i := range batch {
						batch[i] = core.Envelope{ID: int64((w*batches+b)*n + i), GroupKey: "g", Partition: w}
					}
					if err := r.Deliver(ctx, batch); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		seen := map[int64]bool{}
		var pos int64
		for writing := true; ; {
			select {
			case <-done:
				writing = false
			default:
			}
			rows, err := db.QueryContext(ctx, crashQ(db, `SELECT seq, msg_id FROM deliveries WHERE seq > ? ORDER BY seq LIMIT 10`), pos)
			if err != nil {
				t.Fatal(err)
			}
			read := 0
			for rows.Next() {
				var id int64
				if err := rows.Scan(&pos, &id); err != nil {
					t.Fatal(err)
				}
				seen[id] = true
				read++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if !writing && read == 0 {
				break
			}
		}
		if want := writers * batches * n; len(seen) != want {
			t.Errorf("read %d of the %d rows appended by seq", len(seen), want)
		}
	})
}
