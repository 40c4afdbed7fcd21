package uitest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// BenchmarkPages measures the server time of the dashboard's pages on PostgreSQL, over
// a table of 100,000 pending and 10,000 dead messages across 3 outboxes, or, with
// OUTBOXER_UI_BENCH=full, 1,000,000 pending and 100,000 dead (the figures of
// BENCHMARKS.md). Each sub-benchmark reports its p50 and p95 in milliseconds.
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 100x ./ui/test
func BenchmarkPages(b *testing.B) {
	pending, dead := 100_000, 10_000
	if os.Getenv("OUTBOXER_UI_BENCH") == "full" {
		pending, dead = 1_000_000, 100_000
	}
	db := dbtest.Postgres(b)
	ctx := context.Background()
	if err := core.Migrate(ctx, db.DB, core.MigrateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	// One message in 11 is dead, spread over the IDs (dead messages of every age); of
	// the pending ones, 90% are ready, 5% wait for a retry and 5% are held behind them,
	// over 10,000 groups and 4 partitions per outbox.
	_, err := db.ExecContext(ctx, `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers, state, attempts, last_error, available_at)
		SELECT 'outbox' || (i % 3), 'type' || (i % 7), 'g' || (i % 10000), (i / 3) % 4, convert_to('{"n":' || i || ',"pad":"`+fmt.Sprintf("%0200d", 0)+`"}', 'UTF8'),
			'{"tenant":"t' || (i % 5) || '"}',
			CASE WHEN i % 11 = 10 THEN 2 WHEN i % 20 = 0 THEN 3 WHEN i % 20 = 1 THEN 4 ELSE 0 END,
			CASE WHEN i % 11 = 10 THEN 10 WHEN i % 20 = 0 THEN 2 ELSE 0 END,
			CASE WHEN i % 11 = 10 THEN 'rejected: ' || i WHEN i % 20 = 0 THEN 'broker timeout' END,
			now() + CASE WHEN i % 11 <> 10 AND i % 20 = 0 THEN interval '1 hour' ELSE interval '0' END
		FROM generate_series(1, $1) AS i`, pending+dead)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE outboxer_messages`); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d messages (%d dead) loaded in %s", pending+dead, dead, time.Since(start).Round(time.Second))
	h, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: db.DB, Dialect: core.Postgres}}})
	if err != nil {
		b.Fatal(err)
	}
	// IDs at 0%, 50% and 99% of outbox1's pending and dead messages: page depths.
	depth := func(state string, frac float64) int64 {
		var id int64
		q := `SELECT id FROM outboxer_messages WHERE outbox = 'outbox1' AND state ` + state + ` ORDER BY id OFFSET $1 LIMIT 1`
		n := pending / 3
		if state == "= 2" {
			n = dead / 3
		}
		if err := db.QueryRowContext(ctx, q, int(float64(n)*frac)).Scan(&id); err != nil {
			b.Fatal(err)
		}
		return id
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"outbox", "/outbox?i=main&o=outbox1"},
	}
	for _, d := range []struct {
		name string
		frac float64
	}{{"first", 0}, {"middle", 0.5}, {"last", 0.99}} {
		after := depth("IN (0, 3, 4)", d.frac)
		if d.frac == 0 {
			after = 0
		}
		pages = append(pages, struct{ name, path string }{"pending-" + d.name, "/messages?i=main&o=outbox1&after=" + strconv.FormatInt(after, 10)})
		after = depth("= 2", d.frac)
		if d.frac == 0 {
			after = 0
		}
		pages = append(pages, struct{ name, path string }{"dead-" + d.name, "/messages?i=main&o=outbox1&state=dead&after=" + strconv.FormatInt(after, 10)})
	}
	mid := depth("IN (0, 3, 4)", 0.5)
	var waiting int64
	if err := db.QueryRowContext(ctx, `SELECT MIN(id) FROM outboxer_messages WHERE outbox = 'outbox1' AND state = 3 AND id > $1`, mid).Scan(&waiting); err != nil {
		b.Fatal(err)
	}
	pages = append(pages,
		struct{ name, path string }{"retrying-middle", "/messages?i=main&o=outbox1&state=retrying&after=" + strconv.FormatInt(mid, 10)},
		struct{ name, path string }{"type-filter-middle", "/messages?i=main&o=outbox1&type=type3&after=" + strconv.FormatInt(mid, 10)},
		struct{ name, path string }{"message", "/message?i=main&o=outbox1&id=" + strconv.FormatInt(waiting, 10)},
	)
	// core.Health, for comparison: it counts every outbox's backlog, as the overview did
	// before it read bounded counts.
	admin, err := core.New(core.Config{DB: db.DB, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{
		"outbox0": {Partitions: 4}, "outbox1": {Partitions: 4}, "outbox2": {Partitions: 4}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("core-health-3-outboxes", func(b *testing.B) {
		for b.Loop() {
			if _, err := admin.Health(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	report := func(b *testing.B, times []time.Duration) {
		slices.Sort(times)
		pct := func(q float64) float64 {
			return float64(times[min(len(times)-1, int(q*float64(len(times))))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(0.5), "p50-ms")
		b.ReportMetric(pct(0.95), "p95-ms")
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			times := make([]time.Duration, 0, b.N)
			for b.Loop() {
				rec := httptest.NewRecorder()
				t0 := time.Now()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				times = append(times, time.Since(t0))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d\n%s", p.path, rec.Code, rec.Body)
				}
			}
			report(b, times)
		})
	}
	// The floor of the overview and the outbox page: the statements one request sends
	// (recorded), run one after the other on the same pool without the handler.
	rec := &recorder{}
	recDB := dbtest.Hooked(b, db, rec.add).DB
	recH, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: recDB, Dialect: core.Postgres}}})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pages[:2] {
		recH.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p.path, nil))
		stmts := rec.take()
		b.Run(p.name+"-statements-alone", func(b *testing.B) {
			times := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				for _, st := range stmts {
					rows, err := db.QueryContext(ctx, st.query, st.args...)
					if err != nil {
						b.Fatal(err)
					}
					for rows.Next() {
					}
					rows.Close()
				}
				times = append(times, time.Since(t0))
			}
			b.ReportMetric(float64(len(stmts)), "statements")
			report(b, times)
		})
	}
}
