package dbtest_test

// Run waits for what a deployment brings up late (the database, the
// migration, the broker) instead of returning at once with nothing logged.

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// startRetrying runs ob, an instance on db whose tables were never created, with relay and
// a logger writing into the Logs it returns. Run's result arrives on done; cancel stops
// it (the end of the test does too).
func startRetrying(t *testing.T, db *dbtest.DB, relay core.Relay) (ob *core.Outboxer, logs *dbtest.Logs, done <-chan error, cancel context.CancelFunc) {
	t.Helper()
	logs, logger := dbtest.NewLogs()
	ob = unmigrated(t, db, logger, relay, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ob, logs, runAsync(ob, ctx), cancel
}

// openHandle opens a handle on a database that may refuse, or not be there; the end of
// the test closes it.
func openHandle(t *testing.T, driver, dsn string) *dbtest.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &dbtest.DB{DB: db}
}

// runAsync starts ob.Run(ctx) and returns the channel its result arrives on.
func runAsync(ob *core.Outboxer, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx) }()
	return done
}

// Run started before the migration job: it logs an Error line per try, keeps trying, and
// delivers once the tables exist; a graceful stop then returns nil.
func TestRunWaitsForTheMigration(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		rec := &recorder{}
		ob, logs, done, cancel := startRetrying(t, db, rec)
		// Four tries: the migration job comes about a second after the relay.
		eventually(t, 20*time.Second, "four Error lines about the missing table", func() bool {
			return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 4
		})
		select {
		case err := <-done:
			t.Fatalf("Run returned before the migration: %v", err)
		default:
		}
		line := logs.Lines(slog.LevelError, "cannot start; retrying")[0]
		if !strings.Contains(line.Attrs["err"], "run Migrate") || line.Attrs["retry_in"] == "" {
			t.Errorf("the Error line says %v; want the missing table named, with the next try", line.Attrs)
		}
		if err := ob.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		envs := publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "a"})
		eventually(t, 60*time.Second, "the messages delivered after the migration", func() bool { return len(rec.delivered()) == 2 })
		for i, e := range rec.delivered() {
			if e.ID != envs[i].ID {
				t.Errorf("delivery %d is message %d, want %d", i, e.ID, envs[i].ID)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after a graceful stop: %v, want nil", err)
		}
	})
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// A database that does not answer is tried again and again until ctx ends; Run then
// returns an error matching ctx's that names the last failure.
func TestRunRetriesAnUnreachableDatabase(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			port := closedPort(t)
			driver, dsn := "pgx", "postgres://postgres@127.0.0.1:"+port+"/test?sslmode=disable&connect_timeout=2"
			if d == core.MySQL {
				driver, dsn = "mysql", "root@tcp(127.0.0.1:"+port+")/test?timeout=2s"
			}
			ob, logs, done, cancel := startRetrying(t, openHandle(t, driver, dsn), &recorder{})
			eventually(t, 20*time.Second, "three Error lines about the unreachable database", func() bool {
				return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 3
			})
			select {
			case err := <-done:
				t.Fatalf("Run returned while its context was live: %v", err)
			default:
			}
			cancel()
			err := <-done
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run after cancel: %v, want an error matching context.Canceled", err)
			}
			if !strings.Contains(err.Error(), "refused") {
				t.Errorf("Run's error %q does not name the last failure (connection refused)", err)
			}
			// Nothing ran: Run may be called again.
			ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel2()
			if err := ob.Run(ctx2); errors.Is(err, core.ErrAlreadyRunning) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("second Run: %v, want an error matching context.DeadlineExceeded", err)
			}
		})
	}
}

// What waiting cannot fix comes back at once, logged at Error: partitions changed on a
// live backlog, and a second Run of a running instance.
func TestRunReturnsAtOnceWhatWaitingCannotFix(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 2, PollInterval: time.Hour}}})
		stop := run(t, first)
		eventually(t, 20*time.Second, "the first relay holding its partitions", func() bool {
			st, err := first.Status(ctx, "orders")
			return err == nil && len(st) == 2 && st[0].LeaseHeld && st[1].LeaseHeld
		})
		stop()
		publish(t, first, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "b"}, event{Seq: 3, Group: "c"})

		logs, logger := dbtest.NewLogs()
		second := setup(t, db, core.Config{Logger: logger, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 3}}})
		err := second.Run(ctx)
		if !errors.Is(err, core.ErrRepartitioned) {
			t.Fatalf("Run with 3 partitions on a live backlog of 2: %v, want ErrRepartitioned", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Run returned only when its context ended")
		}
		if got := logs.Lines(slog.LevelError, "not retrying"); len(got) != 1 || !strings.Contains(got[0].Attrs["err"], "partitions") {
			t.Errorf("Error lines %v, want one naming the partitions\n%s", got, logs)
		}
		if got := logs.Lines(slog.LevelError, "retrying;"); len(got) != 0 {
			t.Errorf("Run retried what waiting cannot fix: %v", got)
		}

		logs, logger = dbtest.NewLogs()
		third := setup(t, db, core.Config{Logger: logger, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 2, PollInterval: time.Hour}}})
		run(t, third)
		eventually(t, 20*time.Second, "the running instance's log", func() bool { return len(logs.Lines(slog.LevelInfo, "running")) == 1 })
		if err := third.Run(ctx); !errors.Is(err, core.ErrAlreadyRunning) {
			t.Fatalf("second Run: %v, want ErrAlreadyRunning", err)
		}
		if got := logs.Lines(slog.LevelError, "Run called twice"); len(got) != 1 {
			t.Errorf("Error lines for the second Run: %v, want one", got)
		}
	})
}

// flakyStarter fails its first Starts, then starts; with permanent, it fails for good.
type flakyStarter struct {
	recorder
	mu              sync.Mutex
	fails, calls    int
	permanent       bool
	started, closed int
}

func (s *flakyStarter) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.permanent {
		return core.Permanent(errors.New("no such topic"))
	}
	if s.calls <= s.fails {
		return errors.New("broker not up yet")
	}
	s.started++
	return nil
}

func (s *flakyStarter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

func (s *flakyStarter) counts() (calls, started, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.started, s.closed
}

// A relay whose Start fails is started again with the same backoff, and a relay that
// started is not started twice; a Start error marked Permanent stops Run at once.
func TestRunRetriesAFailingStarter(t *testing.T) {
	db := dbtest.SQLite(t)
	logs, logger := dbtest.NewLogs()
	ready, flaky := &flakyStarter{}, &flakyStarter{fails: 2}
	ob := setup(t, db, core.Config{Logger: logger, Outboxes: map[string]core.OutboxConfig{
		"a": {Relay: ready, PollInterval: 10 * time.Millisecond}, // started first, once
		"b": {Relay: flaky, PollInterval: 10 * time.Millisecond},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ob, ctx)
	publish(t, ob, db.DB, event{Box: "b", Seq: 1})
	eventually(t, 20*time.Second, "delivery once the relay started", func() bool { return len(flaky.delivered()) == 1 })
	if calls, started, _ := ready.counts(); calls != 1 || started != 1 {
		t.Errorf("the relay that started at once was started %d time(s), %d successfully; want 1", calls, started)
	}
	if calls, started, _ := flaky.counts(); calls != 3 || started != 1 {
		t.Errorf("the failing relay: %d Start call(s), %d successful; want 3 and 1", calls, started)
	}
	if got := logs.Lines(slog.LevelError, "cannot start; retrying"); len(got) != 2 || !strings.Contains(got[0].Attrs["err"], "broker not up yet") {
		t.Errorf("Error lines %v, want two naming the relay's error", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, _, closed := flaky.counts(); closed != 1 {
		t.Errorf("the relay was closed %d time(s), want 1", closed)
	}

	ok, broken := &flakyStarter{}, &flakyStarter{permanent: true}
	ob2, err := core.New(core.Config{DB: db.DB, Logger: quiet, Outboxes: map[string]core.OutboxConfig{
		"a": {Relay: ok}, "b": {Relay: broken}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := ob2.Run(ctx2); !errors.Is(err, core.ErrPermanent) || ctx2.Err() != nil {
		t.Fatalf("Run with a relay that cannot start: %v, want an error matching ErrPermanent at once", err)
	}
	if calls, _, _ := broken.counts(); calls != 1 {
		t.Errorf("a Permanent Start error was tried %d times, want 1", calls)
	}
	if _, started, closed := ok.counts(); started != 1 || closed != 1 {
		t.Errorf("the relay that did start: started %d, closed %d; want it closed once Run gave up", started, closed)
	}
	if _, _, closed := broken.counts(); closed != 0 {
		t.Errorf("the relay that never started was closed %d time(s), want 0", closed)
	}
}
