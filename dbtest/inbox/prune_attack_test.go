package inbox_test

// Attacks on the dedup window: the pruner racing a claim at the window's edge.

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// hookExec runs after before each statement of Claim whose text contains match has run.
type hookExec struct {
	exec  core.Executor
	match string
	after func()
}

func (h *hookExec) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := h.exec.ExecContext(ctx, q, args...)
	if err == nil && h.after != nil && strings.Contains(q, h.match) {
		f := h.after
		h.after = nil
		f()
	}
	return res, err
}

// age moves the receipt of every record and the raise of every group mark back by d.
func age(t *testing.T, db *dbtest.DB, d time.Duration) {
	t.Helper()
	us := d.Microseconds()
	var stmts []string
	switch db.Dialect {
	case core.Postgres:
		stmts = []string{`UPDATE outboxer_inbox SET received_at = received_at - $1 * interval '1 microsecond'`,
			`UPDATE outboxer_inbox_groups SET updated_at = updated_at - $1 * interval '1 microsecond'`}
	case core.MySQL:
		stmts = []string{`UPDATE outboxer_inbox SET received_at = received_at - INTERVAL ? MICROSECOND`,
			`UPDATE outboxer_inbox_groups SET updated_at = updated_at - INTERVAL ? MICROSECOND`}
	case core.SQLite:
		stmts = []string{`UPDATE outboxer_inbox SET received_at = received_at - ?`,
			`UPDATE outboxer_inbox_groups SET updated_at = updated_at - ?`}
	}
	for _, q := range stmts {
		if _, err := db.Exec(q, us); err != nil {
			t.Fatal(err)
		}
	}
}

// pruneDuring starts in.Prune on another connection and returns when it has finished
// or is waiting for a lock the caller's transaction holds; wait returns its result.
func pruneDuring(t *testing.T, db *dbtest.DB, in *inbox.Inbox) (wait func() (int64, error)) {
	t.Helper()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := in.Prune(context.Background())
		done <- result{n, err}
	}()
	var r *result
	wait = func() (int64, error) {
		if r == nil {
			x := <-done
			r = &x
		}
		return r.n, r.err
	}
	// Is the prune's DELETE waiting for a lock? (MariaDB: still running, which it does
	// until the caller commits; innodb_trx does not always show the wait.) SQLite shows
	// nothing: its one writer is the caller's transaction, so the prune waits
	// (busy_timeout) for it as a whole. Whichever way it goes, the outcome must be right;
	// the wait only makes PostgreSQL's interleaving the one that went wrong.
	blocked := map[core.Dialect]string{
		core.Postgres: `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM%outboxer_inbox%'`,
		core.MySQL:    `SELECT count(*) FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Sleep' AND INFO LIKE 'DELETE FROM%outboxer_inbox%'`,
	}[db.Dialect]
	if blocked == "" {
		return wait
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case x := <-done:
			r = &x
			return wait
		default:
		}
		var n int
		if err := db.QueryRow(blocked).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return wait
		}
		if time.Now().After(deadline) {
			t.Fatal("the prune neither finished nor waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAttackPruneRacesGroupMark: a group's mark was last raised more than a window ago
// and the pruner deletes it just as a newer message of the group is claimed, between
// the claim's "insert the mark if new" and its "raise the mark if lower". The newer
// message is the group's latest: it must be Claimed and raise the mark, never be
// reported Stale (which tells the handler to skip or dead-letter it).
func TestAttackPruneRacesGroupMark(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{Window: time.Hour, StaleCheck: true})
		ctx := context.Background()
		g := inbox.GroupOf("orders", "order:1")
		claim(t, in, db.DB, "billing", inbox.Message{Key: "m5", Group: g, Seq: 5}, true)
		age(t, db, 2*time.Hour)

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var wait func() (int64, error)
		h := &hookExec{exec: tx, match: "outboxer_inbox_groups", after: func() { wait = pruneDuring(t, db, in) }}
		o, err := in.Claim(ctx, h, "billing", inbox.Message{Key: "m9", Group: g, Seq: 9})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if wait == nil {
			t.Fatal("the hook did not run: Claim's statements changed")
		}
		if _, err := wait(); err != nil {
			t.Fatal(err)
		}
		if o != inbox.Claimed {
			t.Errorf("the group's newest message, claimed while the pruner deleted the group's old mark: %v, want claimed", o)
		}
		// The mark is the newest message's: an older one is stale.
		if o := claim(t, in, db.DB, "billing", inbox.Message{Key: "m7", Group: g, Seq: 7}, true); o != inbox.Stale {
			t.Errorf("an older message after it: %v, want stale", o)
		}
	})
}
