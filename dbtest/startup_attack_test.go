package dbtest_test

// What Run's start-up retries and Notify promise,
// tried the ways a deployment gets them wrong.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// unmigrated returns an instance on db whose tables were never created.
func unmigrated(t *testing.T, db *dbtest.DB, logger *slog.Logger, relay core.Relay, mod func(*core.Config)) *core.Outboxer {
	t.Helper()
	cfg := core.Config{DB: db.DB, Logger: logger, Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: relay, PollInterval: 10 * time.Millisecond}}}
	if mod != nil {
		mod(&cfg)
	}
	ob, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// A ctx cancelled with a cause (context.WithCancelCause, WithTimeoutCause) during the
// start-up retries: Run's error must still match ctx's error, as its docs say, and the
// cause too.
func TestAttackStartUpStoppedWithACause(t *testing.T) {
	db := dbtest.SQLite(t)
	cause := errors.New("the service is shutting down")
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, func())
		want error
	}{
		{"cancel", func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(cause) }
		}, context.Canceled},
		{"deadline", func() (context.Context, func()) {
			ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Second, cause) // past the first try, even under -race
			return ctx, func() { <-ctx.Done(); cancel() }
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs, logger := dbtest.NewLogs()
			ob := unmigrated(t, db, logger, &recorder{}, nil)
			ctx, stop := tc.ctx()
			done := runAsync(ob, ctx)
			eventually(t, 20*time.Second, "a start-up retry", func() bool {
				return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 1
			})
			stop()
			err := <-done
			if !errors.Is(err, tc.want) {
				t.Errorf("Run stopped by a ctx with a cause: %v, want an error matching %v", err, tc.want)
			}
			if !errors.Is(err, cause) {
				t.Errorf("Run stopped by a ctx with a cause: %v, want the cause too", err)
			}
			if !errors.Is(err, core.ErrNotMigrated) {
				t.Errorf("Run's error %v does not wrap the last start-up failure (ErrNotMigrated)", err)
			}
		})
	}
}

// ctx cancelled while Run sleeps between tries: Run returns without finishing the sleep
// (the test waits for a try announcing at least 1.6 s before the next, and requires Run
// back well before that), and makes no further try.
func TestAttackStartUpCancelledDuringTheBackoff(t *testing.T) {
	db := dbtest.SQLite(t)
	_, logs, done, cancel := startRetrying(t, db, &recorder{})
	var wait time.Duration
	eventually(t, 30*time.Second, "a retry announced 1.6 s or more ahead", func() bool {
		lines := logs.Lines(slog.LevelError, "cannot start; retrying")
		if len(lines) == 0 {
			return false
		}
		d, err := time.ParseDuration(lines[len(lines)-1].Attrs["retry_in"])
		if err != nil {
			t.Fatalf("retry_in %q: %v", lines[len(lines)-1].Attrs["retry_in"], err)
		}
		wait = d
		return d >= 1600*time.Millisecond
	})
	tries := len(logs.Lines(slog.LevelError, "cannot start; retrying"))
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want an error matching context.Canceled", err)
		}
	case <-time.After(wait):
		t.Fatalf("Run still sleeping %v after its ctx was cancelled", wait)
	}
	if got := len(logs.Lines(slog.LevelError, "cannot start; retrying")); got != tries {
		t.Errorf("%d start-up tries logged after the cancel", got-tries)
	}
}

// The message table exists but a table beside it does not (a migration cut half way,
// or run by hand from an old script). Without the leases table start-up retries, naming
// that table, and starts once Migrate completes it; without the nodes table the relay
// starts and delivers, warning of the table at each heartbeat.
func TestAttackStartUpHalfMigrated(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		for _, missing := range []string{"_leases", "_nodes"} {
			t.Run(strings.TrimPrefix(missing, "_"), func(t *testing.T) {
				rec := &recorder{}
				ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, PollInterval: 10 * time.Millisecond}}})
				if _, err := db.ExecContext(ctx, `DROP TABLE outboxer_messages`+missing); err != nil {
					t.Fatal(err)
				}
				logs, logger := dbtest.NewLogs()
				ob2 := unmigrated(t, db, logger, rec, nil)
				runCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				done := runAsync(ob2, runCtx)
				if missing == "_nodes" {
					// Start-up does not need the nodes table: the relay delivers alone,
					// and its heartbeat says at Warn, naming the table, what is missing.
					envs := publish(t, ob, db.DB, event{Seq: 1, Group: "a"})
					eventually(t, 60*time.Second, "delivery without the nodes table", func() bool { return len(rec.delivered()) == 1 })
					if got := rec.delivered()[0].ID; got != envs[0].ID {
						t.Errorf("delivered message %d, want %d", got, envs[0].ID)
					}
					eventually(t, 30*time.Second, "a Warn naming the missing nodes table", func() bool {
						for _, l := range logs.Lines(slog.LevelWarn, "heartbeat failed") {
							if strings.Contains(l.Attrs["err"], "outboxer_messages_nodes") {
								return true
							}
						}
						return false
					})
					cancel()
					if err := <-done; err != nil {
						t.Errorf("Run: %v", err)
					}
					return
				}
				eventually(t, 20*time.Second, "two start-up retries", func() bool {
					return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 2
				})
				line := logs.Lines(slog.LevelError, "cannot start; retrying")[0]
				if !strings.Contains(line.Attrs["err"], "outboxer_messages"+missing) {
					t.Errorf("the Error line says %q; want the missing table outboxer_messages%s named", line.Attrs["err"], missing)
				}
				if err := ob.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				envs := publish(t, ob, db.DB, event{Seq: 1, Group: "a"})
				eventually(t, 60*time.Second, "delivery once the migration completed", func() bool { return len(rec.delivered()) == 1 })
				if got := rec.delivered()[0].ID; got != envs[0].ID {
					t.Errorf("delivered message %d, want %d", got, envs[0].ID)
				}
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
		}
	})
}

// Wrong credentials: retried (they may be provisioned after the service starts, and a
// rotation may lag), with the server's refusal in every Error line and in Run's error.
func TestAttackStartUpWrongCredentials(t *testing.T) {
	for _, tc := range []struct{ name, driver, dsn, says string }{
		{"mariadb-password", "mysql", "root:wrong-password@tcp(127.0.0.1:3306)/test", "Access denied"},
		{"postgres-role", "pgx", "postgres://no_such_role_outboxer@127.0.0.1:5432/test?sslmode=disable", "no_such_role_outboxer"},
		{"postgres-database", "pgx", "postgres://postgres@127.0.0.1:5432/no_such_db_outboxer?sslmode=disable", "no_such_db_outboxer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, logs, done, cancel := startRetrying(t, openHandle(t, tc.driver, tc.dsn), &recorder{})
			eventually(t, 20*time.Second, "three start-up retries", func() bool {
				return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 3
			})
			for _, l := range logs.Lines(slog.LevelError, "cannot start; retrying") {
				if !strings.Contains(l.Attrs["err"], tc.says) {
					t.Errorf("Error line %v does not say %q", l.Attrs, tc.says)
				}
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Run: %v, want context.Canceled and %q", err, tc.says)
			}
		})
	}
}

// Run called again, from another goroutine, while the first is still retrying:
// ErrAlreadyRunning at once, and the first goes on to start and deliver.
func TestAttackStartUpRunTwiceWhileRetrying(t *testing.T) {
	db := dbtest.SQLite(t)
	rec := &recorder{}
	ob, logs, done, cancel := startRetrying(t, db, rec)
	ctx := context.Background()
	eventually(t, 20*time.Second, "a start-up retry", func() bool {
		return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 1
	})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = ob.Run(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, core.ErrAlreadyRunning) {
			t.Errorf("concurrent Run %d: %v, want ErrAlreadyRunning", i, err)
		}
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	envs := publish(t, ob, db.DB, event{Seq: 1})
	eventually(t, 30*time.Second, "delivery by the first Run", func() bool { return len(rec.delivered()) == 1 })
	if rec.delivered()[0].ID != envs[0].ID {
		t.Errorf("delivered %d, want %d", rec.delivered()[0].ID, envs[0].ID)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("first Run: %v", err)
	}
}

// panickyStarter panics in its first Start, then starts.
type panickyStarter struct {
	recorder
	mu     sync.Mutex
	calls  int
	closed int
}

func (s *panickyStarter) Start(context.Context) error {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	s.mu.Unlock()
	if first {
		panic("relay bug")
	}
	return nil
}

func (s *panickyStarter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

// A relay whose Start panics: the panic is the relay's bug and reaches Run's caller
// (nothing swallows it); a caller that recovers it (a supervisor) can call Run again,
// and the relay that did start before it is closed, not leaked.
func TestAttackStartUpPanickingStarter(t *testing.T) {
	db := dbtest.SQLite(t)
	ok, bad := &flakyStarter{}, &panickyStarter{}
	ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{
		"a": {Relay: ok, PollInterval: 10 * time.Millisecond},
		"b": {Relay: bad, PollInterval: 10 * time.Millisecond},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recovered := func() (p any) {
		defer func() { p = recover() }()
		_ = ob.Run(ctx)
		return nil
	}()
	if recovered == nil {
		t.Fatal("Start's panic did not reach Run's caller")
	}
	if _, started, closed := ok.counts(); started != 1 || closed != 1 {
		t.Errorf("the relay started before the panic: started %d, closed %d; want closed once", started, closed)
	}
	done := runAsync(ob, ctx)
	envs := publish(t, ob, db.DB, event{Box: "b", Seq: 1})
	eventually(t, 30*time.Second, "delivery by the second Run", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run after a recovered panic: %v", err)
		default:
		}
		return len(bad.delivered()) == 1
	})
	if bad.delivered()[0].ID != envs[0].ID {
		t.Errorf("delivered %d, want %d", bad.delivered()[0].ID, envs[0].ID)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after a recovered panic: %v", err)
	}
}

// PublishOnly and Manual instances: Run starts nothing, touches no table (the tables
// may not exist yet), logs no error, returns nil when ctx ends, and a second Run is
// ErrAlreadyRunning.
func TestAttackStartUpPublishOnlyAndManual(t *testing.T) {
	for _, mode := range []string{"PublishOnly", "Manual"} {
		t.Run(mode, func(t *testing.T) {
			db := dbtest.SQLite(t)
			logs, logger := dbtest.NewLogs()
			relay := &flakyStarter{permanent: true}
			ob := unmigrated(t, db, logger, relay, func(c *core.Config) {
				c.PublishOnly, c.Manual = mode == "PublishOnly", mode == "Manual"
				if c.PublishOnly {
					c.Outboxes = map[string]core.OutboxConfig{"orders": {}}
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			first, second := runAsync(ob, ctx), runAsync(ob, ctx)
			// One of the two returns ErrAlreadyRunning at once, the other nil when ctx ends.
			var errs []error
			select {
			case err := <-first:
				errs, first = append(errs, err), second
			case err := <-second:
				errs = append(errs, err)
			}
			cancel()
			errs = append(errs, <-first)
			if !errors.Is(errs[0], core.ErrAlreadyRunning) || errs[1] != nil {
				t.Errorf("two Runs returned %v then %v, want ErrAlreadyRunning then nil", errs[0], errs[1])
			}
			if calls, _, _ := relay.counts(); calls != 0 {
				t.Errorf("Run started the relay of a %s instance %d time(s)", mode, calls)
			}
			if got := logs.Lines(slog.LevelError, "cannot start"); len(got) != 0 {
				t.Errorf("Error lines: %v", got)
			}
		})
	}
}

// Several instances in one process retrying at once: each logs its own lines, named,
// and each stops on its own ctx.
func TestAttackStartUpSeveralInstancesRetrying(t *testing.T) {
	db := openHandle(t, "pgx", "postgres://postgres@127.0.0.1:"+closedPort(t)+"/test?sslmode=disable&connect_timeout=2")
	logs, logger := dbtest.NewLogs()
	const n = 4
	var dones []<-chan error
	var cancels []context.CancelFunc
	for i := range n {
		ob := unmigrated(t, db, logger, &recorder{}, func(c *core.Config) { c.Name = "node" + strconv.Itoa(i) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels = append(cancels, cancel)
		dones = append(dones, runAsync(ob, ctx))
	}
	per := func() map[string]int {
		m := map[string]int{}
		for _, l := range logs.Lines(slog.LevelError, "cannot start; retrying") {
			m[l.Attrs["outboxer"]]++
		}
		return m
	}
	eventually(t, 30*time.Second, "three retries logged by every instance", func() bool {
		m := per()
		for i := range n {
			if m["node"+strconv.Itoa(i)] < 3 {
				return false
			}
		}
		return true
	})
	if m := per(); len(m) != n {
		t.Errorf("retry lines by instance: %v, want %d instances, each named", m, n)
	}
	// Stopping one leaves the others retrying.
	cancels[0]()
	if err := <-dones[0]; !errors.Is(err, context.Canceled) {
		t.Errorf("instance 0: %v", err)
	}
	before := per()["node1"]
	eventually(t, 30*time.Second, "node1 still retrying", func() bool { return per()["node1"] > before })
	for i := 1; i < n; i++ {
		cancels[i]()
		if err := <-dones[i]; !errors.Is(err, context.Canceled) {
			t.Errorf("instance %d: %v", i, err)
		}
	}
}

// The log volume of a database that refuses at once: one Error line per try, the tries
// numbered 1, 2, 3… without a gap, and the backoff growing: at most 7 lines in the
// first 3.5 s (50+100+200+400+800+1600 ms is the least the jittered waits can add up
// to), the announced waits never more than 30 s.
func TestAttackStartUpLogVolume(t *testing.T) {
	_, logs, done, cancel := startRetrying(t, openHandle(t, "pgx", "postgres://postgres@127.0.0.1:"+closedPort(t)+"/test?sslmode=disable&connect_timeout=2"), &recorder{})
	eventually(t, 20*time.Second, "the first retry", func() bool {
		return len(logs.Lines(slog.LevelError, "cannot start; retrying")) >= 1
	})
	time.Sleep(3500 * time.Millisecond)
	lines := logs.Lines(slog.LevelError, "")
	cancel()
	<-done
	if len(lines) < 3 || len(lines) > 7 {
		t.Errorf("%d Error lines in 3.5 s of retries, want 3 to 7:\n%s", len(lines), logs)
	}
	var last time.Duration
	for i, l := range lines {
		if l.Attrs["try"] != strconv.Itoa(i+1) {
			t.Errorf("line %d is try %q, want %d", i, l.Attrs["try"], i+1)
		}
		d, err := time.ParseDuration(l.Attrs["retry_in"])
		if err != nil || d > 30*time.Second || (i > 1 && d < last/4) {
			t.Errorf("line %d: retry_in %q after %v", i, l.Attrs["retry_in"], last)
		}
		last = d
	}
}

// Notify on a dialect without LISTEN/NOTIFY, or a NotifyListener without Notify, is
// refused at New, naming the field.
func TestAttackNotifyRefusedAtNew(t *testing.T) {
	for _, d := range []core.Dialect{core.MySQL, core.SQLite} {
		db, err := sql.Open("sqlite", ":memory:")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		_, err = core.New(core.Config{DB: db, Dialect: d, Notify: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}}}})
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "Notify") {
			t.Errorf("Notify on %s: New returned %v, want ErrInvalidConfig naming Notify", d, err)
		}
	}
	pg := dbtest.Postgres(t)
	_, err := core.New(core.Config{DB: pg.DB, NotifyListener: fakeListener{}, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}}}})
	if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "NotifyListener") {
		t.Errorf("NotifyListener without Notify: New returned %v, want ErrInvalidConfig naming NotifyListener", err)
	}
}

type fakeListener struct{}

func (fakeListener) Connect(context.Context) (core.NotifyConn, error) {
	return nil, fmt.Errorf("never called")
}

// wrappedPgx is the pgx driver behind a wrapper of the driver's interfaces only, as a
// tracing or metrics wrapper makes it: a PostgreSQL driver that is not pgx, for Notify.
type wrappedPgx struct{ d driver.Driver }

type fullConn interface {
	driver.Conn
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.Pinger
	driver.NamedValueChecker
}

type wrappedConn struct{ fullConn }

func (w wrappedPgx) Open(name string) (driver.Conn, error) {
	c, err := w.d.Open(name)
	if err != nil {
		return nil, err
	}
	return wrappedConn{c.(fullConn)}, nil
}

var registerWrapped sync.Once

// Notify with Config.DB on a PostgreSQL driver other than pgx, and no NotifyListener:
// the engine cannot wait for notifications on it. It must say so at Warn, naming the
// way out, report it in NotifyStatus, and deliver by polling.
func TestAttackNotifyOnAnotherDriver(t *testing.T) {
	registerWrapped.Do(func() { sql.Register("pgx-wrapped-attack", wrappedPgx{stdlib.GetDefaultDriver()}) })
	pg := dbtest.Postgres(t)
	db, err := sql.Open("pgx-wrapped-attack", dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	logs, logger := dbtest.NewLogs()
	rec := &recorder{}
	ob, err := core.New(core.Config{DB: db, Dialect: core.Postgres, Schema: pg.Schema, Notify: true, Logger: logger,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, PollInterval: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop := run(t, ob)
	defer stop()
	eventually(t, 30*time.Second, "a Warn that Notify is not working", func() bool {
		return len(logs.Lines(slog.LevelWarn, "Notify is NOT working")) > 0
	})
	if w := logs.Lines(slog.LevelWarn, "Notify is NOT working")[0]; !strings.Contains(w.Attrs["err"], "pgx") || !strings.Contains(w.Attrs["err"], "NotifyListener") {
		t.Errorf("the Warn says %v; want the driver and Config.NotifyListener named", w.Attrs)
	}
	if st := ob.NotifyStatus(); st.Listening || !errors.Is(st.Err, core.ErrNotifyNotListening) {
		t.Errorf("NotifyStatus %+v, want ErrNotifyNotListening", st)
	}
	envs := publish(t, ob, db, event{Seq: 1}, event{Seq: 2})
	eventually(t, 30*time.Second, "delivery by polling", func() bool { return len(rec.delivered()) == 2 })
	for i, e := range rec.delivered() {
		if e.ID != envs[i].ID {
			t.Errorf("delivery %d is %d, want %d", i, e.ID, envs[i].ID)
		}
	}
}
