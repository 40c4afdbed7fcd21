package dbtest_test

// Scenario 4 of the reliability suite: the relay's database sessions are killed, and the
// database server is restarted, while many publishers write. Each publisher writes a
// business row and its message in one transaction and goes on only once it knows the
// transaction committed; a commit whose result it could not see is an "unknown", settled
// afterwards by asking the database for the business row. The relay must recover by
// itself, and deliver exactly the committed messages (the business rows), in order per
// group.
//
// Killing sessions disturbs no one else and runs by default; restarting a server stops
// every other test on the machine, so that runs only with OUTBOXER_DISRUPTIVE set (make
// disruptive runs it, alone, with -run Restart).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// loadSink records every delivery in the order it saw them, and every confirmed batch.
type loadSink struct {
	mu    sync.Mutex
	got   []dbtest.Delivery
	ids   map[int64]bool
	stops []loadStop
}

type loadStop struct{ began, confirmed time.Time }

func newLoadSink() *loadSink { return &loadSink{ids: map[int64]bool{}} }

func (s *loadSink) Deliver(_ context.Context, batch []core.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range batch {
		s.got = append(s.got, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		s.ids[e.ID] = true
	}
	return nil
}

// batchStop is the relay's OnBatchStop hook: a batch was delivered and confirmed.
func (s *loadSink) batchStop(ev core.BatchEvent) {
	now := time.Now()
	s.mu.Lock()
	s.stops = append(s.stops, loadStop{began: now.Add(-ev.Duration), confirmed: now})
	s.mu.Unlock()
}

// recoveredAfter is the time from fault to the confirmation of the first batch handed to
// the sink after it (false: none yet).
func (s *loadSink) recoveredAfter(fault time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.stops {
		if !st.began.Before(fault) {
			return st.confirmed.Sub(fault), true
		}
	}
	return 0, false
}

func (s *loadSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *loadSink) hasAll(ids map[int64]string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if !s.ids[id] {
			return false
		}
	}
	return true
}

func (s *loadSink) deliveries() []dbtest.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// loadRun is a crowd of publishers, each writing its messages one transaction at a time.
type loadRun struct {
	db                     *dbtest.DB
	ob                     *core.Outboxer
	publishers, per        int
	pace                   time.Duration
	committed              atomic.Int64 // transactions taken as committed (the publisher went on)
	sure                   atomic.Int64 // of them, commits that returned no error
	failed                 atomic.Int64 // transactions that failed before their commit (tried again)
	unknown, unknownCommit atomic.Int64 // commits with no result seen; of them, found committed at once
	wg                     sync.WaitGroup
	cancel                 context.CancelFunc

	mu       sync.Mutex
	unknowns []string // business keys of the commits with no result, settled at the end
}

// loadTables creates the business table the publishers write with their messages.
func loadTables(t *testing.T, db *dbtest.DB) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(),
		`CREATE TABLE load_biz (tok VARCHAR(40) PRIMARY KEY, msg_id BIGINT NOT NULL, grp VARCHAR(100) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func (l *loadRun) start(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	l.cancel = cancel
	t.Cleanup(func() { cancel(); l.wg.Wait() })
	for p := range l.publishers {
		l.wg.Go(func() {
			for n := range l.per {
				group := fmt.Sprintf("p%d:g%d", p, n%3)
				for !l.publishOne(ctx, n, group) {
					if ctx.Err() != nil {
						return
					}
					l.failed.Add(1)
					time.Sleep(20 * time.Millisecond) // the database is away: try again
				}
				l.committed.Add(1)
				time.Sleep(l.pace)
			}
		})
	}
}

// wait waits for every publisher to finish and reports whether they all did.
func (l *loadRun) wait(within time.Duration) bool {
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(within):
		l.cancel()
		<-done
		return false
	}
}

// publishOne writes one message and its business row in a transaction, and reports
// whether it committed. A commit that returned an error may have committed all the same:
// the business row, looked up once the database answers, says which.
func (l *loadRun) publishOne(ctx context.Context, n int, group string) bool {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return false
	}
	env, err := l.ob.Publish(ctx, tx, event{Seq: n, Group: group})
	if err == nil {
		_, err = tx.ExecContext(ctx, crashQ(l.db, `INSERT INTO load_biz (tok, msg_id, grp) VALUES (?, ?, ?)`), tok, env.ID, group)
	}
	if err != nil {
		_ = tx.Rollback()
		return false
	}
	if err := tx.Commit(); err == nil {
		l.sure.Add(1)
		return true
	}
	// The commit may have happened or not. The publisher must decide now whether to
	// write the message again (a second message for the same event is the price of
	// never losing one); the test settles the question again once every fault is over.
	l.unknown.Add(1)
	l.mu.Lock()
	l.unknowns = append(l.unknowns, tok)
	l.mu.Unlock()
	for ctx.Err() == nil {
		var c int
		err := l.db.QueryRowContext(ctx, crashQ(l.db, `SELECT COUNT(*) FROM load_biz WHERE tok = ?`), tok).Scan(&c)
		if err == nil {
			if c == 1 {
				l.unknownCommit.Add(1)
			}
			return c == 1
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// settle counts the commits with no result that the database holds now.
func (l *loadRun) settle(t *testing.T) int {
	t.Helper()
	n := 0
	for _, tok := range l.unknowns {
		var c int
		if err := l.db.QueryRowContext(context.Background(), crashQ(l.db, `SELECT COUNT(*) FROM load_biz WHERE tok = ?`), tok).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// loadCommitted reads the committed messages from the business table.
func loadCommitted(t *testing.T, db *dbtest.DB) map[int64]string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT msg_id, grp FROM load_biz`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var g string
		if err := rows.Scan(&id, &g); err != nil {
			t.Fatal(err)
		}
		out[id] = g
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// loadCheckOrder checks every delivery, repeated ones too: a message is never handed over
// before the committed message before it in its group was.
func loadCheckOrder(t *testing.T, committed map[int64]string, ds []dbtest.Delivery) {
	t.Helper()
	prev := map[int64]int64{} // message → the committed message before it in its group
	byGroup := map[string][]int64{}
	for id, g := range committed {
		byGroup[g] = append(byGroup[g], id)
	}
	for _, ids := range byGroup {
		slices.Sort(ids)
		for i := 1; i < len(ids); i++ {
			prev[ids[i]] = ids[i-1]
		}
	}
	seen := map[int64]bool{}
	bad := 0
	for _, d := range ds {
		if p, ok := prev[d.ID]; ok && !seen[p] {
			if bad++; bad <= 5 {
				t.Errorf("group %s: message %d handed over before %d", d.GroupKey, d.ID, p)
			}
		}
		seen[d.ID] = true
	}
}

// loadRelayHandle opens a second handle on db for the relay alone, and returns it with a
// function that kills every session of that handle on the server and says how many.
func loadRelayHandle(t *testing.T, db *dbtest.DB) (*sql.DB, func() (int, error)) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "relay_" + hex.EncodeToString(b)
	// The killer has a handle of its own, so that it never waits behind the publishers.
	killer, err := sql.Open(db.Driver, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killer.Close() })
	var dsn string
	var kill func() (int, error)
	switch db.Dialect {
	case core.Postgres:
		// The relay's sessions carry their own application_name.
		u, err := url.Parse(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		dsn = u.String()
		kill = func() (int, error) {
			var n int
			err := killer.QueryRowContext(ctx, `SELECT COUNT(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n)
			return n, err
		}
	case core.MySQL:
		// MariaDB shows no connection attributes without performance_schema: the relay
		// logs in as its own user, which SHOW PROCESSLIST does show.
		cfg, err := mysql.ParseDSN(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{
			fmt.Sprintf("CREATE USER '%s'@'%%'", name),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO '%s'@'%%'", cfg.DBName, name),
		} {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			if _, err := db.ExecContext(context.Background(), fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", name)); err != nil {
				t.Logf("drop user %s: %v", name, err)
			}
		})
		cfg.User, cfg.Passwd = name, ""
		dsn = cfg.FormatDSN()
		kill = func() (int, error) {
			rows, err := killer.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?`, name)
			if err != nil {
				return 0, err
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return 0, err
				}
				ids = append(ids, id)
			}
			rows.Close()
			n := 0
			for _, id := range ids {
				if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
					n++ // (a session that ended meanwhile is "unknown thread")
				}
			}
			return n, nil
		}
	default:
		t.Fatalf("no sessions to kill on %s", db.Dialect)
	}
	relayDB, err := sql.Open(db.Driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relayDB.Close() })
	return relayDB, kill
}

// loadSummary shortens a long list of notes.
func loadSummary(notes []string) string {
	if len(notes) > 4 {
		return fmt.Sprintf("%s; … %d more; %s", strings.Join(notes[:2], "; "), len(notes)-3, notes[len(notes)-1])
	}
	return strings.Join(notes, "; ")
}

// loadConns bounds the publishers' connections.
const loadConns = 30

// loadScenario is one run of scenario 4 on one database.
type loadScenario struct {
	variant           string
	publishers, total int
	pace              time.Duration
	// fault disturbs the relay (and maybe everyone) and returns a note; it is called
	// repeatedly while the publishers run, every gap, at most faults times. killRelay
	// kills every session of the relay's handle and says how many.
	fault  func(t *testing.T, killRelay func() (int, error)) string
	faults int
	gap    time.Duration
}

func (sc loadScenario) run(t *testing.T, db *dbtest.DB) {
	ctx := context.Background()
	notify := db.Dialect == core.Postgres
	pub := setup(t, db, core.Config{PublishOnly: true, Notify: notify, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 4}}})
	loadTables(t, db)
	relayDB, killRelay := loadRelayHandle(t, db)
	sink := newLoadSink()
	relay, err := core.New(core.Config{
		DB: relayDB, Dialect: db.Dialect, Notify: notify, LeaseDuration: 2 * time.Second, Logger: quiet,
		Hooks: core.Hooks{OnBatchStop: sink.batchStop},
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: sink, Partitions: 4, BatchSize: 100, PollInterval: 50 * time.Millisecond, Backoff: fast,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopRelay := run(t, relay)

	// A pool of its own size, as an application has: PostgreSQL allows 100 sessions in
	// all, and other tests run meanwhile.
	db.SetMaxOpenConns(loadConns)
	load := &loadRun{db: db, ob: pub, publishers: sc.publishers, per: sc.total / sc.publishers, pace: sc.pace}
	load.start(t)
	eventually(t, 60*time.Second, "traffic before the first fault", func() bool { return sink.distinct() > 50 })
	var (
		recovery time.Duration
		notes    []string
		faults   int
		probes   int
	)
	for faults < sc.faults && load.committed.Load() < int64(sc.total)*9/10 {
		notes = append(notes, sc.fault(t, killRelay))
		faults++
		// Recovery counts from the end of the fault: the sessions are dead, or the
		// restarted server answers again.
		fault := time.Now()
		// A message of the test's own after each fault, so that there is something to
		// deliver however far the publishers got while the server was away (they may
		// all have finished).
		probes++
		for !load.publishOne(ctx, probes, "probe") {
			if time.Since(fault) > 60*time.Second {
				t.Fatalf("no commit within 60s of the fault")
			}
			time.Sleep(20 * time.Millisecond)
		}
		eventually(t, 120*time.Second, "a delivery after the fault", func() bool {
			d, ok := sink.recoveredAfter(fault)
			if ok {
				recovery = max(recovery, d)
			}
			return ok
		})
		time.Sleep(sc.gap)
	}
	if !load.wait(5 * time.Minute) {
		t.Fatalf("the publishers did not finish: %d of %d committed", load.committed.Load(), sc.total)
	}
	committed := loadCommitted(t, db)
	eventually(t, 120*time.Second, "every committed message delivered", func() bool {
		// And confirmed: a batch whose confirmation failed is in the sink already while
		// the relay has yet to deliver it again.
		c, err := pub.Counts(ctx, "orders")
		return sink.hasAll(committed) && err == nil && c.Pending == 0
	})
	stopRelay()

	if faults == 0 {
		t.Errorf("the publishers finished before the first fault: nothing was tested")
	}
	// Every business row is a commit that returned, or one with no result.
	settled := load.settle(t)
	if n := len(committed); int64(n) != load.sure.Load()+int64(settled) {
		t.Errorf("%d business rows, want the %d commits that returned and the %d of the %d with no result that the database holds",
			n, load.sure.Load(), settled, load.unknown.Load())
	}
	ds := sink.deliveries()
	loadCheckOrder(t, committed, ds)
	if c := counts(t, pub, "orders"); c.Pending != 0 || c.Dead != 0 {
		t.Errorf("counts after every delivery: %+v, want nothing pending or dead", c)
	}
	// Nothing but committed messages was ever stored: with Delete retention the table is
	// now empty.
	var left int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+core.DefaultTable).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d rows left in the outbox table after every delivery", left)
	}
	t.Logf("%d faults (%s); %d commits, %d failed transactions tried again, %d commits with no result: %d committed (%d seen at once)",
		faults, strings.Join(notes, "; "), len(committed), load.failed.Load(), load.unknown.Load(), settled, load.unknownCommit.Load())
	score := dbtest.Tally(dbtest.Score{
		Scenario: "4 killed sessions and restarts", Variant: sc.variant, Database: string(db.Dialect),
		Published: sc.total + probes, Recover: recovery,
		Notes: fmt.Sprintf("%d publishers on %d connections; %d faults (%s); %d commits with no result: %d had committed (%d seen at once, the rest written again); recover: worst time from the end of a fault to the confirmation of a batch handed over after it",
			sc.publishers, loadConns, faults, loadSummary(notes), load.unknown.Load(), settled, load.unknownCommit.Load()),
	}, committed, ds)
	if score.Lost != 0 || score.Phantom != 0 || score.Reordered != 0 {
		t.Errorf("lost %d, phantom %d, reordered %d: want none", score.Lost, score.Phantom, score.Reordered)
	}
	dbtest.Record(t, score)
}

// TestChaosKilledSessions kills every session of the relay (pg_terminate_backend on
// PostgreSQL, KILL CONNECTION on MariaDB), again and again, under load.
func TestChaosKilledSessions(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			killed := 0
			loadScenario{
				variant:    "relay sessions killed",
				publishers: dbtest.Pick(20, 100), total: dbtest.Pick(1000, 10000*max(1, dbtest.ChaosScale())),
				pace:   time.Duration(dbtest.Pick(25, 50)) * time.Millisecond,
				faults: dbtest.Pick(4, 1000), gap: 250 * time.Millisecond,
				fault: func(t *testing.T, killRelay func() (int, error)) string {
					n, err := killRelay()
					if err != nil {
						t.Fatalf("kill the relay's sessions: %v", err)
					}
					killed += n
					return fmt.Sprintf("%d sessions killed", n)
				},
			}.run(t, dbtest.Open(t, d))
			if killed == 0 {
				t.Errorf("no session of the relay was ever killed: nothing was tested")
			}
		})
	}
}

// TestChaosRestartUnderLoad restarts the PostgreSQL and the MariaDB server under load.
// It stops the shared servers for a few seconds, so it runs only with
// OUTBOXER_DISRUPTIVE set (make disruptive runs it alone, after the other tests).
func TestChaosRestartUnderLoad(t *testing.T) {
	if os.Getenv("OUTBOXER_DISRUPTIVE") == "" {
		t.Skip("restarts the database servers: set OUTBOXER_DISRUPTIVE=1 (make disruptive)")
	}
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			// Whatever happens, the server is left running for everyone else.
			t.Cleanup(func() { loadEnsureServer(t, d) })
			var downs []string
			loadScenario{
				variant:    "server restarted",
				publishers: dbtest.Pick(20, 100), total: dbtest.Pick(1000, 10000*max(1, dbtest.ChaosScale())),
				pace:   time.Duration(dbtest.Pick(30, 50)) * time.Millisecond,
				faults: dbtest.Pick(1, 3), gap: 2 * time.Second,
				fault: func(t *testing.T, _ func() (int, error)) string {
					down := loadRestart(t, d)
					downs = append(downs, down.Round(time.Millisecond).String())
					return "restart took " + down.Round(time.Millisecond).String()
				},
			}.run(t, dbtest.Open(t, d))
			t.Logf("restarts took %s", strings.Join(downs, ", "))
		})
	}
}

// loadRestart restarts the server of the dialect and returns once it answers again, with
// how long that took.
func loadRestart(t *testing.T, d core.Dialect) time.Duration {
	t.Helper()
	start := time.Now()
	switch d {
	case core.Postgres:
		v, err := loadPostgresVersion()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", v, "main", "restart").CombinedOutput(); err != nil {
			t.Fatalf("restart PostgreSQL: %v\n%s", err, out)
		}
	case core.MySQL:
		if out, err := exec.Command("mariadb-admin", "-uroot", "shutdown").CombinedOutput(); err != nil {
			t.Fatalf("stop MariaDB: %v\n%s", err, out)
		}
		// Start only once the old server is gone, or --oknodo would keep it "running".
		deadline := time.Now().Add(60 * time.Second)
		for exec.Command("start-stop-daemon", "--status", "--exec", "/usr/sbin/mariadbd").Run() == nil {
			if time.Now().After(deadline) {
				t.Fatalf("MariaDB did not stop within 60s of its shutdown")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if out, err := exec.Command("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd").CombinedOutput(); err != nil {
			t.Fatalf("start MariaDB: %v\n%s", err, out)
		}
	}
	if err := loadWaitServer(d, 60*time.Second); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	return time.Since(start)
}

// loadEnsureServer starts the server of the dialect if it does not answer.
func loadEnsureServer(t *testing.T, d core.Dialect) {
	if loadWaitServer(d, time.Second) == nil {
		return
	}
	t.Logf("the %s server is down: starting it", d)
	var cmd *exec.Cmd
	switch d {
	case core.Postgres:
		v, err := loadPostgresVersion()
		if err != nil {
			t.Error(err)
			return
		}
		cmd = exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", v, "main", "start")
	case core.MySQL:
		cmd = exec.Command("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("start %s: %v\n%s", d, err, out)
	}
	if err := loadWaitServer(d, 60*time.Second); err != nil {
		t.Errorf("the %s server is still down: %v", d, err)
	}
}

func loadPostgresVersion() (string, error) {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) != 1 {
		return "", fmt.Errorf("find the PostgreSQL cluster: %v (%d versions)", err, len(entries))
	}
	return entries[0].Name(), nil
}

// loadWaitServer waits until the server of the dialect answers a query.
func loadWaitServer(d core.Dialect, within time.Duration) error {
	driver, dsn := "pgx", dbtest.PostgresURL()
	if d == core.MySQL {
		driver, dsn = "mysql", dbtest.MariaDBDSN()
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var one int
		err = db.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer: %w", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
