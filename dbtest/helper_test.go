package dbtest_test

// Tests that run relays in other processes: several relays on one table, a relay killed
// mid-batch, a notification crossing processes. The test binary runs itself as the relay
// process when OUTBOXER_TEST_HELPER is set (see TestMain).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

const helperEnv = "OUTBOXER_TEST_HELPER"

// helperConfig travels to the relay process in its environment.
type helperConfig struct {
	Driver, DSN string
	Dialect     core.Dialect
	Partitions  int
	BatchSize   int
	Poll        time.Duration
	Lease       time.Duration
	CrashAfter  int  // block forever inside the n-th batch, after recording it (the parent kills)
	Notify      bool // LISTEN/NOTIFY (PostgreSQL)
	// KillBatch > 0: the process records its KillBatch-th batch (counted across its
	// partitions) one message at a time, and SIGKILLs itself right after the sink recorded
	// KillAcks of them (0: before any), having printed "KILL batch=B part=P k=K ids=1,2,…".
	KillBatch, KillAcks int
	// BatchColumn: the deliveries table has a batch column (crashTables adds it); each
	// delivery records the process's batch number there, and the process prints FIRST
	// when it hands over its first batch.
	BatchColumn bool
	// OrderedLog: the deliveries table is read by seq while it is written, as a broker's
	// log is read by offset. A sequence or an auto-increment gives out its numbers when a
	// statement runs, not when it commits: two partitions' batches commit in either order,
	// and a reader that saw seq 140 would never see 101–120 committed after it. Each
	// append then holds the log's lock (a row of log_lock) until it commits, so rows
	// become visible in seq order.
	OrderedLog bool
}

func (c helperConfig) env() []string {
	return append(os.Environ(),
		helperEnv+"=relay",
		"H_DRIVER="+c.Driver, "H_DSN="+c.DSN, "H_DIALECT="+string(c.Dialect),
		"H_PARTITIONS="+strconv.Itoa(c.Partitions), "H_BATCH="+strconv.Itoa(c.BatchSize),
		"H_POLL="+c.Poll.String(), "H_LEASE="+c.Lease.String(),
		"H_CRASH_AFTER="+strconv.Itoa(c.CrashAfter), "H_NOTIFY="+strconv.FormatBool(c.Notify),
		"H_KILL_BATCH="+strconv.Itoa(c.KillBatch), "H_KILL_ACKS="+strconv.Itoa(c.KillAcks),
		"H_BATCH_COLUMN="+strconv.FormatBool(c.BatchColumn), "H_ORDERED_LOG="+strconv.FormatBool(c.OrderedLog),
	)
}

// runHelper is the relay process: it relays the "orders" outbox into the deliveries table
// until SIGTERM, and records any moment two processes serve one partition at once.
func runHelper(string) int {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	dur := func(k string) time.Duration { d, _ := time.ParseDuration(os.Getenv(k)); return d }
	cfg := helperConfig{
		Driver: os.Getenv("H_DRIVER"), DSN: os.Getenv("H_DSN"), Dialect: core.Dialect(os.Getenv("H_DIALECT")),
		Partitions: atoi("H_PARTITIONS"), BatchSize: atoi("H_BATCH"), Poll: dur("H_POLL"), Lease: dur("H_LEASE"),
		CrashAfter: atoi("H_CRASH_AFTER"), Notify: os.Getenv("H_NOTIFY") == "true",
		KillBatch: atoi("H_KILL_BATCH"), KillAcks: atoi("H_KILL_ACKS"), BatchColumn: os.Getenv("H_BATCH_COLUMN") == "true",
		OrderedLog: os.Getenv("H_ORDERED_LOG") == "true",
	}
	db, err := sql.Open(cfg.Driver, cfg.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	relay := &tableRelay{db: db, dialect: cfg.Dialect, pid: os.Getpid(), crashAfter: cfg.CrashAfter,
		killBatch: cfg.KillBatch, killAcks: cfg.KillAcks, batchColumn: cfg.BatchColumn, orderedLog: cfg.OrderedLog}
	ob, err := core.New(core.Config{
		DB: db, Dialect: cfg.Dialect, LeaseDuration: cfg.Lease, Notify: cfg.Notify, Logger: testLogger(),
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, Partitions: cfg.Partitions, BatchSize: cfg.BatchSize, PollInterval: cfg.Poll,
			Backoff: core.Backoff{Func: func(int) time.Duration { return 10 * time.Millisecond }},
		}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		// READY once this process holds a partition.
		for ctx.Err() == nil {
			st, _ := ob.Status(ctx, "orders")
			for _, p := range st {
				if p.LeaseHeld && strings.Contains(p.Owner, "/"+strconv.Itoa(os.Getpid())+"/") {
					fmt.Println("READY")
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := ob.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// tableRelay writes what it delivers into the deliveries table, in its own statements
// (as a broker would receive it, outside the outbox's transactions).
type tableRelay struct {
	db         *sql.DB
	dialect    core.Dialect
	pid        int
	mu         sync.Mutex
	batches    int
	crashAfter int

	killBatch, killAcks int
	batchColumn         bool
	orderedLog          bool
	started             int // batches handed over so far
}

func (r *tableRelay) q(s string) string { return placeholders(r.dialect, s) }

// placeholders rewrites the ? placeholders of q as $1, $2, … for PostgreSQL.
func placeholders(d core.Dialect, q string) string {
	if d != core.Postgres {
		return q
	}
	n := 0
	return replaceEach(q, "?", func() string { n++; return "$" + strconv.Itoa(n) })
}

func replaceEach(s, old string, next func() string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, old)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(next())
		s = s[i+len(old):]
	}
}

func (r *tableRelay) Deliver(ctx context.Context, batch []core.Envelope) error {
	part := batch[0].Partition
	// Claim the partition for the time of the delivery; a second claimer is a violation.
	if holder, err := r.claim(ctx, part); err != nil {
		if holder != 0 {
			_, _ = r.db.ExecContext(context.Background(), r.q(`INSERT INTO violations (what) VALUES (?)`),
				fmt.Sprintf("pid %d: partition %d already being served by pid %d: %v", r.pid, part, holder, err))
		}
		return err
	}
	defer r.db.ExecContext(context.WithoutCancel(ctx), r.q(`DELETE FROM active WHERE part = ? AND pid = ?`), part, r.pid)
	r.mu.Lock()
	r.started++
	no := r.started
	// Printed before the lock is let go: the worker of another partition may take batch
	// number 2, the one to die in, at once, and with KillAcks 0 it kills the process
	// before anything else; FIRST must be out by then.
	if r.batchColumn && no == 1 {
		fmt.Println("FIRST")
	}
	r.mu.Unlock()
	if r.killBatch > 0 && no > r.killBatch {
		// The process is dying in batch killBatch: the sink gets nothing after it, so a
		// process delivers at most its kill batch and those before it, and the tests'
		// backlogs outlast every round.
		select {}
	}
	if r.killBatch > 0 && no == r.killBatch {
		r.recordAndDie(batch, no)
	}
	var b strings.Builder
	args := make([]any, 0, len(batch)*4)
	if r.batchColumn {
		b.WriteString(`INSERT INTO deliveries (msg_id, grp, pid, batch) VALUES `)
	} else {
		b.WriteString(`INSERT INTO deliveries (msg_id, grp, pid) VALUES `)
	}
	for i, e := range batch {
		if i > 0 {
			b.WriteString(", ")
		}
		if r.batchColumn {
			b.WriteString("(?, ?, ?, ?)")
			args = append(args, e.ID, e.GroupKey, r.pid, no)
		} else {
			b.WriteString("(?, ?, ?)")
			args = append(args, e.ID, e.GroupKey, r.pid)
		}
	}
	if err := r.append(ctx, r.q(b.String()), args...); err != nil {
		return err
	}
	r.mu.Lock()
	r.batches++
	crash := r.crashAfter > 0 && r.batches == r.crashAfter
	r.mu.Unlock()
	if crash {
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = strconv.FormatInt(e.ID, 10)
		}
		fmt.Println("CRASH " + strings.Join(ids, ","))
		select {} // the parent sends SIGKILL
	}
	return nil
}

// append writes into the deliveries table with insert, under the log's lock when the
// log is ordered (see helperConfig.OrderedLog).
func (r *tableRelay) append(ctx context.Context, insert string, args ...any) error {
	if !r.orderedLog || r.dialect == core.SQLite {
		// SQLite has one writer at a time: a row's seq is given out and committed under
		// the same lock.
		_, err := r.db.ExecContext(ctx, insert, args...)
		return err
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var id int
	if err := tx.QueryRowContext(ctx, `SELECT id FROM log_lock WHERE id = 1 FOR UPDATE`).Scan(&id); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
		return err
	}
	return tx.Commit()
}

// claim records that this process serves the partition. It fails with the holder's pid
// when a live process holds the claim (a violation), with 0 for any other failure (the
// delivery fails and is tried again). A claim left by a process that no longer exists
// (killed, so it could not withdraw it; or a statement it sent just before it died,
// which the server carried out afterwards) is taken over: the dead serve nothing.
func (r *tableRelay) claim(ctx context.Context, part int) (holder int, err error) {
	insert := r.q(`INSERT INTO active (part, pid) VALUES (?, ?)`)
	for range 2 {
		if _, err = r.db.ExecContext(ctx, insert, part, r.pid); err == nil {
			return 0, nil
		}
		if qerr := r.db.QueryRowContext(ctx, r.q(`SELECT pid FROM active WHERE part = ?`), part).Scan(&holder); qerr != nil {
			return 0, err // gone meanwhile, or the database is away: try the delivery again
		}
		if holder == r.pid || !errors.Is(syscall.Kill(holder, 0), syscall.ESRCH) {
			return holder, err
		}
		if _, derr := r.db.ExecContext(ctx, r.q(`DELETE FROM active WHERE part = ? AND pid = ?`), part, holder); derr != nil {
			return 0, derr
		}
	}
	return 0, err
}

// recordAndDie records the first killAcks messages of the batch one at a time, each
// in its own statement (a broker acknowledging them one by one), then kills the process
// with SIGKILL: exactly killAcks messages of the batch reached the sink, none confirmed.
func (r *tableRelay) recordAndDie(batch []core.Envelope, no int) {
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = strconv.FormatInt(e.ID, 10)
	}
	k := min(r.killAcks, len(batch))
	fmt.Printf("KILL batch=%d part=%d k=%d ids=%s\n", no, batch[0].Partition, k, strings.Join(ids, ","))
	q := r.q(`INSERT INTO deliveries (msg_id, grp, pid, batch) VALUES (?, ?, ?, ?)`)
	for _, e := range batch[:k] {
		// Not the delivery's context: k must be exact even if the lease ran short.
		if err := r.append(context.Background(), q, e.ID, e.GroupKey, r.pid, no); err != nil {
			fmt.Fprintln(os.Stderr, "record before the kill:", err)
			os.Exit(3)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// relayTables creates the tables the relay processes write into.
func relayTables(t *testing.T, db *dbtest.DB) {
	t.Helper()
	id := "seq INTEGER PRIMARY KEY AUTOINCREMENT"
	switch db.Dialect {
	case core.Postgres:
		id = "seq bigserial PRIMARY KEY"
	case core.MySQL:
		id = "seq BIGINT AUTO_INCREMENT PRIMARY KEY"
	}
	for _, ddl := range []string{
		`CREATE TABLE deliveries (` + id + `, msg_id BIGINT NOT NULL, grp VARCHAR(255) NOT NULL, pid INT NOT NULL)`,
		`CREATE TABLE active (part INT PRIMARY KEY, pid INT NOT NULL)`,
		`CREATE TABLE violations (what TEXT)`,
		`CREATE TABLE log_lock (id INT PRIMARY KEY)`, // see helperConfig.OrderedLog
		`INSERT INTO log_lock (id) VALUES (1)`,
	} {
		if _, err := db.ExecContext(context.Background(), ddl); err != nil {
			t.Fatal(err)
		}
	}
}

// startRelay starts a relay process (runHelper) with cfg.
func startRelay(t *testing.T, cfg helperConfig) *child {
	t.Helper()
	return startChild(t, cfg.env(), nil)
}

type delivery struct {
	msgID int64
	grp   string
	pid   int
}

func deliveries(t *testing.T, db *dbtest.DB) []delivery {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT msg_id, grp, pid FROM deliveries ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []delivery
	for rows.Next() {
		var d delivery
		if err := rows.Scan(&d.msgID, &d.grp, &d.pid); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// allConfirmed reports whether the sink holds every one of total messages and the outbox
// has none pending. The sink alone is not enough after a kill: the killed batch reached
// the sink before its process died, so the sink can hold every message while the heir
// has yet to deliver that batch again and confirm it; stopping the heir then would leave
// it pending.
func allConfirmed(t *testing.T, db *dbtest.DB, ob *core.Outboxer, outbox string, total int) bool {
	t.Helper()
	return distinctDelivered(t, db) == total && counts(t, ob, outbox).Pending == 0
}

func distinctDelivered(t *testing.T, db *dbtest.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT COUNT(DISTINCT msg_id) FROM deliveries`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkDeliveries checks that every published message was delivered, that no message was
// handed over before every earlier message of its group had been, that nothing was
// delivered twice except the IDs in mayRepeat, and that no partition had two servers.
func checkDeliveries(t *testing.T, db *dbtest.DB, published []core.Envelope, mayRepeat map[int64]bool) []delivery {
	t.Helper()
	ds := deliveries(t, db)
	pos := map[int64]int{} // index of a message within its group
	groupOf := map[int64]string{}
	perGroup := map[string]int{}
	for _, e := range published {
		pos[e.ID] = perGroup[e.GroupKey]
		perGroup[e.GroupKey]++
		groupOf[e.ID] = e.GroupKey
	}
	seen := map[int64]int{}
	reached := map[string]int{} // per group: how many of its first messages were delivered
	for _, d := range ds {
		seen[d.msgID]++
		if seen[d.msgID] > 1 && !mayRepeat[d.msgID] {
			t.Errorf("message %d delivered %d times", d.msgID, seen[d.msgID])
		}
		g := groupOf[d.msgID]
		if g == "" {
			continue
		}
		switch p := pos[d.msgID]; {
		case p == reached[g]:
			reached[g]++
		case p > reached[g]:
			t.Errorf("group %s: message %d (#%d) delivered before #%d", g, d.msgID, p, reached[g])
		}
	}
	for _, e := range published {
		if seen[e.ID] == 0 {
			t.Errorf("message %d never delivered", e.ID)
		}
	}
	var violations []string
	rows, err := db.QueryContext(context.Background(), `SELECT what FROM violations`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var v string
		_ = rows.Scan(&v)
		violations = append(violations, v)
	}
	if len(violations) > 0 {
		t.Errorf("partitions served by two processes at once: %v", violations)
	}
	return ds
}

func helperFor(db *dbtest.DB) helperConfig {
	return helperConfig{Driver: db.Driver, DSN: db.DSN, Dialect: db.Dialect, Partitions: 4, BatchSize: 50,
		Poll: 20 * time.Millisecond, Lease: 2 * time.Second}
}

func TestSeveralRelayProcessesOnOneTable(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 4}}})
		relayTables(t, db)
		cfg := helperFor(db)
		first := startRelay(t, cfg)
		first.waitLine(t, "READY", 30*time.Second)
		second := startRelay(t, cfg)
		var published []core.Envelope
		publishSome := func(from, to int) {
			for i := from; i < to; i += 20 {
				msgs := make([]core.Message, 20)
				for j := range msgs {
					msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("order:%d", (i+j)%25)}
				}
				published = append(published, publish(t, ob, db.DB, msgs...)...)
			}
		}
		publishSome(0, 1000)
		eventually(t, 60*time.Second, "half the messages", func() bool { return distinctDelivered(t, db) >= 500 })
		// One relay leaves gracefully, a third joins, while publishing goes on.
		first.stop(t)
		third := startRelay(t, cfg)
		publishSome(1000, 2000)
		eventually(t, 120*time.Second, "every message", func() bool { return distinctDelivered(t, db) == len(published) })
		second.stop(t)
		third.stop(t)
		ds := checkDeliveries(t, db, published, nil)
		pids := map[int]bool{}
		for _, d := range ds {
			pids[d.pid] = true
		}
		if len(pids) < 2 {
			t.Errorf("only %d process delivered; the test did not exercise sharing", len(pids))
		}
		if c := counts(t, ob, "orders"); c.Pending != 0 {
			t.Errorf("pending = %d after every delivery", c.Pending)
		}
	})
}

func TestRelayKilledMidBatch(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		// One partition: the killed process has exactly one batch in flight.
		ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		relayTables(t, db)
		var published []core.Envelope
		for i := 0; i < 1000; i += 100 {
			msgs := make([]core.Message, 100)
			for j := range msgs {
				msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("order:%d", (i+j)%10)}
			}
			published = append(published, publish(t, ob, db.DB, msgs...)...)
		}
		cfg := helperFor(db)
		cfg.Partitions, cfg.CrashAfter = 1, 4
		victim := startRelay(t, cfg)
		line := victim.waitLine(t, "CRASH ", 60*time.Second)
		victim.kill()
		inFlight := map[int64]bool{}
		for _, s := range strings.Split(strings.TrimPrefix(line, "CRASH "), ",") {
			id, _ := strconv.ParseInt(s, 10, 64)
			inFlight[id] = true
		}
		// The killed process could not clean up its claim; a broker would not care.
		if _, err := db.ExecContext(ctx, `DELETE FROM active`); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		cfg.CrashAfter = 0
		heir := startRelay(t, cfg)
		heir.waitLine(t, "READY", 30*time.Second)
		// The dead process's leases run out; the heir takes over within the lease bound.
		if took := time.Since(restarted); took > cfg.Lease+cfg.Lease/4+5*time.Second {
			t.Errorf("takeover took %v, more than the lease bound", took)
		}
		eventually(t, 60*time.Second, "every message after the restart", func() bool { return allConfirmed(t, db, ob, "orders", len(published)) })
		heir.stop(t)
		ds := checkDeliveries(t, db, published, inFlight)
		repeats := 0
		for _, d := range ds {
			if inFlight[d.msgID] {
				repeats++
			}
		}
		if repeats != 2*len(inFlight) {
			t.Errorf("the in-flight batch of %d was delivered %d times in all, want each twice", len(inFlight), repeats)
		}
	})
}

func TestNotifyWakesARelayInAnotherProcess(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx := context.Background()
	ob := setup(t, db, core.Config{PublishOnly: true, Notify: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 2}}})
	relayTables(t, db)
	cfg := helperFor(db)
	cfg.Partitions, cfg.Notify, cfg.Poll = 2, true, time.Hour // only a notification can wake it
	relay := startRelay(t, cfg)
	relay.waitLine(t, "READY", 30*time.Second)
	time.Sleep(200 * time.Millisecond) // the first empty fetches are done; the workers sleep
	var published []core.Envelope
	for i := range 5 {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		env, err := ob.Publish(ctx, tx, event{Seq: i, Group: fmt.Sprint("g", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		published = append(published, env)
		eventually(t, 20*time.Second, "delivery woken by NOTIFY", func() bool { return distinctDelivered(t, db) == i+1 })
		t.Logf("publish to delivery across processes: %v", time.Since(start))
	}
	relay.stop(t)
	checkDeliveries(t, db, published, nil)
}
