package dbtest_test

// With a blocked and a scheduled backlog, a worker's round must cost
// what its deliverable rows cost. Timing a round would measure the machine; this test
// records every statement the worker sends while a poisoned group is set aside behind
// its failing head, the head is retried and ready messages of other groups go out. Then
// it puts the table back as it was right after the head's first failure (the head
// waiting, the rest of its group ready behind it, the scheduled backlog waiting) and
// measures how many rows of the message table each statement reads there: PostgreSQL
// by EXPLAIN ANALYZE (on a table without statistics, as right after a backlog was
// written), MariaDB by its session's handler counters, SQLite by its query plan (no
// statement may scan the table). Before the fix, on PostgreSQL the query for when the
// next waiting row is due read every waiting row, after every round; on MariaDB the
// fetch read, for each ready row of the poisoned group, every other ready row of it.

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestBacklogRoundReadsNoBacklog(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		const (
			size  = 3000 // per backlog
			bound = 600  // rows a statement may read: a fifth of one backlog, six per row of a batch
			table = "round_backlog"
		)
		log := &statementLog{}
		handle := dbtest.Hooked(t, db, func(_ context.Context, s dbtest.Statement) { log.add(s.Query, s.Args) }).DB
		rec := &recorder{}
		rec.Fail = func(batch []core.Envelope) error {
			for _, e := range batch {
				if e.GroupKey == "poison" {
					return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
				}
			}
			return nil
		}
		ob, err := core.New(core.Config{DB: handle, Dialect: db.Dialect, Logger: quiet, Table: table,
			Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: rec, BatchSize: 100, PollInterval: 20 * time.Millisecond,
				Backoff: core.Backoff{Func: func(int) time.Duration { return 50 * time.Millisecond }},
			}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if db.Dialect == core.Postgres {
			// No statistics, whenever autovacuum would come by: the planner must not need them.
			if _, err := db.ExecContext(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`); err != nil {
				t.Fatal(err)
			}
		}
		poisoned, scheduled := make([]core.Message, size), make([]core.Message, size)
		for i := range size {
			poisoned[i] = event{Seq: i, Group: "poison"}
			scheduled[i] = event{Seq: i, Group: fmt.Sprintf("later:%d", i)}
		}
		publish(t, ob, db.DB, poisoned...)
		if _, err := ob.PublishAll(ctx, db.DB, scheduled, core.WithDelay(24*time.Hour)); err != nil {
			t.Fatal(err)
		}

		// headAttempts reads the poisoned head's attempts, and how many rows a fetch reads.
		headAttempts := func() (attempts, ready int) {
			q := chaosQ(db, `SELECT (SELECT attempts FROM `+table+` WHERE outbox = ? AND group_key = 'poison' AND state IN (0, 3) ORDER BY id LIMIT 1), `+
				`(SELECT COUNT(*) FROM `+table+` WHERE outbox = ? AND state = 0)`)
			if err := db.QueryRowContext(ctx, q, "orders", "orders").Scan(&attempts, &ready); err != nil {
				t.Fatalf("read the head: %v", err)
			}
			return attempts, ready
		}
		stop := run(t, ob)
		// From the first delivery on: the start-up's checks read the backlog once, by design.
		eventually(t, time.Minute, "the first batch", func() bool { return rec.Batches() > 0 })
		log.record(true)
		eventually(t, 5*time.Minute, "the poisoned head tried twice, its group held behind it", func() bool {
			a, r := headAttempts()
			return a >= 2 && r <= 1
		})

		// More rounds: the head retried twice more, and ready messages of other groups.
		from, _ := headAttempts()
		var ready []core.Envelope
		for i := range 5 {
			ready = append(ready, publish(t, ob, db.DB, event{Seq: i, Group: fmt.Sprintf("ready:%d", i)})...)
		}
		eventually(t, time.Minute, "the ready messages delivered and the head retried", func() bool {
			a, _ := headAttempts()
			return a >= from+2 && len(rec.delivered()) == len(ready)
		})
		stop()
		log.record(false)

		// Back to right after the head's first failure: the head waits, its group is ready
		// behind it (the fetch reads it and finds it behind; Hold sets it aside).
		q := chaosQ(db, `UPDATE `+table+` SET state = CASE WHEN id = (SELECT id FROM (SELECT MIN(id) AS id FROM `+table+
			` WHERE group_key = 'poison') AS h) THEN 3 ELSE 0 END WHERE outbox = ? AND group_key = 'poison' AND state IN (0, 3, 4)`)
		if _, err := db.ExecContext(ctx, q, "orders"); err != nil {
			t.Fatal(err)
		}

		stmts := log.distinct(table)
		if len(stmts) < 3 {
			t.Fatalf("recorded %d statements on the message table, want the fetch, the promotion and more", len(stmts))
		}
		for _, s := range stmts {
			n, how := rowsRead(t, db, s)
			t.Logf("%5d rows (%s): %s", n, how, s.query)
			if n > bound {
				t.Errorf("a round's statement reads %d rows of the %d-row backlogs (at most %d): %s", n, 2*size, bound, s.query)
			}
		}
	})
}

// rowsRead runs s and says how many rows of the message table it read, and how that
// was measured. A statement that changes rows runs in a transaction rolled back.
func rowsRead(t *testing.T, db *dbtest.DB, s loggedStatement) (int, string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	switch db.Dialect {
	case core.Postgres:
		var plan string
		if err := tx.QueryRowContext(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+s.query, s.args...).Scan(&plan); err != nil {
			t.Fatalf("EXPLAIN %s: %v", s.query, err)
		}
		var root []struct{ Plan planNode }
		if err := json.Unmarshal([]byte(plan), &root); err != nil {
			t.Fatalf("EXPLAIN %s: %v", s.query, err)
		}
		return root[0].Plan.rows(s.table), "EXPLAIN ANALYZE"
	case core.MySQL:
		handlerReads := func() int {
			rows, err := tx.QueryContext(ctx, `SHOW SESSION STATUS LIKE 'Handler_read%'`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			sum := 0
			for rows.Next() {
				var name string
				var n int
				if err := rows.Scan(&name, &n); err != nil {
					t.Fatal(err)
				}
				sum += n
			}
			return sum
		}
		before := handlerReads()
		if strings.HasPrefix(s.query, "SELECT") {
			rows, err := tx.QueryContext(ctx, s.query, s.args...)
			if err != nil {
				t.Fatalf("%s: %v", s.query, err)
			}
			for rows.Next() {
			}
			rows.Close()
		} else if _, err := tx.ExecContext(ctx, s.query, s.args...); err != nil {
			t.Fatalf("%s: %v", s.query, err)
		}
		after := handlerReads()
		own := handlerReads() - after // what reading the counters costs
		return after - before - own, "handler reads"
	}
	rows, err := tx.QueryContext(ctx, `EXPLAIN QUERY PLAN `+s.query, s.args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", s.query, err)
	}
	defer rows.Close()
	var plan []string
	subqueries := map[string]bool{} // a scan of one reads the rows its query gave, not the table
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
		for _, p := range []string{"CO-ROUTINE ", "MATERIALIZE "} {
			if name, ok := strings.CutPrefix(detail, p); ok {
				subqueries[name] = true
			}
		}
		scanned, _, _ := strings.Cut(strings.TrimPrefix(detail, "SCAN "), " ")
		// A scan of the message table reads all of it; a search reads a range of an index.
		if strings.HasPrefix(detail, "SCAN ") && !subqueries[scanned] && !strings.Contains(detail, "json_each") && !strings.Contains(detail, "CONSTANT ROW") {
			var all int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+s.table).Scan(&all); err != nil {
				t.Fatal(err)
			}
			return all, "a scan of the table: " + strings.Join(plan, "; ")
		}
	}
	return 0, "EXPLAIN QUERY PLAN: index searches only"
}

// planNode is a node of PostgreSQL's JSON plan.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Recheck  float64    `json:"Rows Removed by Index Recheck"`
	Plans    []planNode `json:"Plans"`
}

// rows counts the rows of table the plan's scans read, over all loops: the rows a scan
// returned or filtered out, and the entries a bitmap index scan collected (its heap scan
// returns them, or filters them out).
func (p planNode) rows(table string) int {
	n := 0
	switch {
	case p.Type == "Bitmap Index Scan" && strings.HasPrefix(p.Index, table+"_"):
		n += int(p.Rows * p.Loops)
	case p.Type == "Bitmap Heap Scan" && p.Relation == table:
		n += int(p.Recheck * p.Loops)
	case strings.HasSuffix(p.Type, "Scan") && p.Relation == table:
		n += int((p.Rows + p.Removed + p.Recheck) * p.Loops)
	}
	for _, c := range p.Plans {
		n += c.rows(table)
	}
	return n
}

// statementLog keeps the statements a handle sends while recording, with their arguments.
type statementLog struct {
	mu    sync.Mutex
	on    bool
	stmts []loggedStatement
}

type loggedStatement struct {
	query, table string
	args         []any
}

func (l *statementLog) record(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
}

func (l *statementLog) add(q string, args []driver.NamedValue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	a := make([]any, len(args))
	for i, v := range args {
		a[i] = v.Value
	}
	l.stmts = append(l.stmts, loggedStatement{query: q, args: a})
}

// distinct returns the first of each statement text of a round that reads or changes
// table's messages, in the order they were first sent.
func (l *statementLog) distinct(table string) []loggedStatement {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	var out []loggedStatement
	for _, s := range l.stmts {
		// Not a round's: publishes, and the sweep for rows beyond the partition count
		// (every quarter lease, in a goroutine of its own).
		if seen[s.query] || strings.HasPrefix(s.query, "INSERT") || strings.Contains(s.query, " part >= ") {
			continue
		}
		q := strings.NewReplacer("`", `"`).Replace(s.query)
		if !strings.Contains(q, `"`+table+`" `) && !strings.HasSuffix(q, `"`+table+`"`) {
			continue
		}
		seen[s.query] = true
		s.table = table
		out = append(out, s)
	}
	return out
}
