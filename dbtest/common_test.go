package dbtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	"github.com/outboxer-go/outboxer/dbtest"
)

// event is the message most tests publish.
type event struct {
	Box   string            `json:"-"`
	Group string            `json:"-"`
	Seq   int               `json:"seq"`
	Hdr   map[string]string `json:"-"`
}

func (e event) Outbox() string {
	if e.Box == "" {
		return "orders"
	}
	return e.Box
}
func (e event) GroupKey() string           { return e.Group }
func (e event) Headers() map[string]string { return e.Hdr }
func (event) MessageType() string          { return "test.Event" }

var quiet = testLogger()

// setup migrates the default table and returns an instance on db.
func setup(t testing.TB, db *dbtest.DB, cfg core.Config) *core.Outboxer {
	t.Helper()
	ctx := context.Background()
	cfg.DB = db.DB
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.Outboxes == nil {
		cfg.Outboxes = map[string]core.OutboxConfig{"orders": {Relay: &recorder{}}}
	}
	ob, err := core.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return ob
}

// recorder is coretest's Recorder, with the short name the tests use.
type recorder struct{ coretest.Recorder }

func (r *recorder) delivered() []core.Envelope { return r.Delivered() }

// eventually waits, bounded, for cond.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run starts ob.Run and stops it when the test ends, failing if Run returns an error.
func run(t testing.TB, ob *core.Outboxer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func counts(t testing.TB, ob *core.Outboxer, outbox string) core.Counts {
	t.Helper()
	c, err := ob.Counts(context.Background(), outbox)
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return c
}

func publish(t testing.TB, ob *core.Outboxer, db core.Executor, msgs ...core.Message) []core.Envelope {
	t.Helper()
	envs, err := ob.PublishAll(context.Background(), db, msgs)
	if err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	return envs
}

// countingExec wraps a handle and counts the statements that go through it.
type countingExec struct {
	*sql.Tx
	mu sync.Mutex
	n  int
}

func (c *countingExec) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Tx.ExecContext(ctx, q, args...)
}

func (c *countingExec) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Tx.QueryContext(ctx, q, args...)
}

func (c *countingExec) InTransaction() bool { return true }

// tableExists reports whether a table is in the test's database.
func tableExists(t testing.TB, db *dbtest.DB, name string) bool {
	t.Helper()
	var q string
	switch db.Dialect {
	case core.Postgres:
		q = fmt.Sprintf(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '%s' AND table_name = '%s'`, db.Schema, name)
	case core.MySQL:
		q = fmt.Sprintf(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '%s'`, name)
	case core.SQLite:
		q = fmt.Sprintf(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'`, name)
	}
	var n int
	if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("tableExists: %v", err)
	}
	return n == 1
}

var _ = io.Discard

// testLogger discards the engine's logs unless OUTBOXER_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("OUTBOXER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
