package uitest

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// recorder keeps the statements a database handle runs, with their arguments.
type recorder struct {
	mu    sync.Mutex
	stmts []recorded
}

type recorded struct {
	query string
	args  []any
}

func (r *recorder) add(_ context.Context, s dbtest.Statement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := make([]any, len(s.Args))
	for i, v := range s.Args {
		a[i] = v.Value
	}
	r.stmts = append(r.stmts, recorded{s.Query, a})
}

func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

// bulkFixture is the fixture with 100,000 more messages on PostgreSQL, over three
// outboxes: mostly ready, some waiting, held, dead and delivered (kept), created over the
// last 50 minutes, the oldest first, as a backlog builds up. Its dashboard runs on a
// handle that records every statement. It returns the ID in the middle of the table.
func bulkFixture(t *testing.T) (*fixture, *recorder, int64) {
	db := dbtest.Postgres(t)
	f := newFixture(t, db)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `INSERT INTO "Order" (outbox, type, group_key, part, payload, headers, state, attempts, last_error, available_at, created_at)
		SELECT 'bulk' || (i % 3), 'type' || (i % 7), 'g' || (i % 1000), i % 4, convert_to('{"n":' || i || '}', 'UTF8'),
			'{"tenant":"t' || (i % 5) || '"}',
			CASE WHEN i % 10 = 0 THEN 2 WHEN i % 10 = 1 THEN 3 WHEN i % 10 = 2 THEN 4 WHEN i % 10 = 3 THEN 1 ELSE 0 END,
			CASE WHEN i % 10 IN (0, 1) THEN 3 ELSE 0 END,
			CASE WHEN i % 10 IN (0, 1) THEN 'timeout ' || i END,
			now() + CASE WHEN i % 10 = 1 THEN interval '1 hour' ELSE interval '0' END,
			now() - (100000 - i) * interval '30 milliseconds'
		FROM generate_series(1, 100000) AS i`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE "Order" SET delivered_at = now() WHERE state = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE "Order"`); err != nil {
		t.Fatal(err)
	}
	var mid int64
	if err := db.QueryRowContext(ctx, `SELECT MAX(id) / 2 FROM "Order"`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	recDB := dbtest.Hooked(t, db, rec.add).DB
	h, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: recDB, Dialect: core.Postgres, Table: table}}})
	if err != nil {
		t.Fatal(err)
	}
	f.handler = h
	f.srv.Config.Handler = h
	f.base = f.srv.URL + "/"
	return f, rec, mid
}

// explainPages fetches each page and checks with EXPLAIN that none of the statements it
// ran through the recording handle reads the message table by a sequential scan. It
// returns the plans, joined.
func explainPages(t *testing.T, f *fixture, rec *recorder, pages []string) string {
	t.Helper()
	ctx := context.Background()
	var all []string
	rec.take()
	for _, p := range pages {
		f.mustGet(p)
		stmts := rec.take()
		if len(stmts) == 0 {
			t.Fatalf("%s ran no statement through the recording handle", p)
		}
		for _, s := range stmts {
			if !strings.Contains(s.query, `"Order"`) || !strings.HasPrefix(strings.TrimSpace(s.query), "SELECT") && !strings.HasPrefix(strings.TrimSpace(s.query), "WITH") {
				continue
			}
			rows, err := f.db.QueryContext(ctx, "EXPLAIN "+s.query, s.args...)
			if err != nil {
				t.Fatalf("EXPLAIN %s: %v", s.query, err)
			}
			var plan []string
			for rows.Next() {
				var line string
				rows.Scan(&line)
				plan = append(plan, line)
			}
			rows.Close()
			text := strings.Join(plan, "\n")
			all = append(all, text)
			if strings.Contains(text, `Seq Scan on "Order"`) {
				t.Errorf("%s: a sequential scan of the message table:\n%s\n%s", p, s.query, text)
			}
		}
	}
	return strings.Join(all, "\n")
}

// TestListQueriesUseAnIndex runs the message pages over 100,000 messages on PostgreSQL,
// records every statement they send, and checks with EXPLAIN that none reads the message
// table by a sequential scan.
func TestListQueriesUseAnIndex(t *testing.T) {
	f, rec, mid := bulkFixture(t)
	var one int64
	if err := f.db.QueryRowContext(context.Background(), `SELECT MIN(id) FROM "Order" WHERE outbox = 'bulk0' AND id > $1`, mid).Scan(&one); err != nil {
		t.Fatal(err)
	}
	m := strconv.FormatInt(mid, 10)
	explainPages(t, f, rec, []string{
		"messages?i=main&o=bulk1",
		"messages?i=main&o=bulk1&after=" + m,
		"messages?i=main&o=bulk1&before=" + m,
		"messages?i=main&o=bulk2&state=retrying&after=" + m,
		"messages?i=main&o=bulk2&state=scheduled",
		"messages?i=main&o=bulk2&state=dead&after=" + m,
		"messages?i=main&o=bulk0&state=delivered&after=" + m,
		"messages?i=main&o=bulk0&type=type3&after=" + m,
		// Not here: a group filter on the pending list. No index has group_key for ready
		// messages (the migration indexes ready rows by partition), so PostgreSQL reads
		// the outbox's rows for a rare group.
		"messages?i=main&o=bulk0&state=retrying&group=g42",
		"messages?i=main&o=bulk0&state=dead&group=g40",
		"messages?i=main&o=bulk0&hk=tenant&hv=t2&after=" + m,
		"messages?i=main&o=bulk0&state=dead&err=timeout+9",
		"messages?i=main&o=bulk0&min=" + m + "&max=" + strconv.FormatInt(mid+5000, 10),
		"messages?i=main&o=bulk0&age=10m",
		"message?i=main&o=bulk0&id=" + strconv.FormatInt(one, 10),
	})
}

// TestOverviewQueriesUseAnIndex does the same for the overview and the outbox page,
// whose counts stop at 10000 (each bulk outbox has more pending messages than that),
// and checks that the pages say so.
func TestOverviewQueriesUseAnIndex(t *testing.T) {
	f, rec, _ := bulkFixture(t)
	plans := explainPages(t, f, rec, []string{"", "outbox?i=main&o=bulk1"})
	// The partial indexes of ready, waiting, blocking and dead rows serve the counts
	// and the probes.
	for _, idx := range []string{`"Order_pending"`, `"Order_waiting"`, `"Order_blocking"`, `"Order_dead"`} {
		if !strings.Contains(plans, idx) {
			t.Errorf("no statement of the overview or the outbox page uses the index %s:\n%s", idx, plans)
		}
	}
	// bulk1: 20,000 ready, 3,334 waiting, 3,333 held, 3,334 dead, 3,333 delivered.
	// The overview counts its ready messages up to 10000 and shows a bound, with the
	// 6,667 waiting and held counted in full; retrying is counted among the first 1000
	// of those, so it is a bound too. The outbox page counts per partition, up to 2500
	// each (10000 shared among 4): the ready ones (5,000 each) are a bound there too.
	body := f.mustGet("")
	mustContain(t, "the overview", body, `state=pending">16667&#43;<`, `state=dead">3334<`)
	if !regexp.MustCompile(`o=bulk1&amp;state=retrying">[1-9]\d*&#43;<`).MatchString(body) {
		t.Errorf("the overview does not show a bound on bulk1's retrying messages:\n%s", body)
	}
	body = f.mustGet("outbox?i=main&o=bulk1")
	mustContain(t, "the outbox page", body, `16667&#43; pending`, `3334 dead`, `id="partitions"`, `id="blocked-sampled"`)
}
