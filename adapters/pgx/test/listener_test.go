package pgxoutbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	"github.com/outboxer-go/outboxer/dbtest"
)

type order struct {
	ID int `json:"id"`
}

func (order) Outbox() string      { return "orders" }
func (order) GroupKey() string    { return "order:1" }
func (order) MessageType() string { return "test.Order" }

// pooled returns a relay instance and a publish-only one whose DB goes through PgBouncer
// in transaction mode, both with Notify; the relay listens through listener.
func pooled(t *testing.T, db *dbtest.DB, listener core.NotifyListener, logger *slog.Logger, rec core.Relay) (relay, pub *core.Outboxer) {
	t.Helper()
	relay, err := core.New(core.Config{DB: db.DB, Schema: db.Schema, Notify: true, NotifyListener: listener, Logger: logger,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 2, PollInterval: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	pub, err = core.New(core.Config{DB: db.DB, Schema: db.Schema, Notify: true, PublishOnly: true,
		Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	return relay, pub
}

// runUntilCleanup runs ob until the test ends and checks that it stopped cleanly.
func runUntilCleanup(t *testing.T, ob *core.Outboxer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The engine runs through PgBouncer in transaction mode, and the
// relay listens on a session of its own straight to PostgreSQL: each commit wakes it.
// The relay polls every 30 s, and the five messages, published one after the other, must
// all be delivered within 10 s: only notifications can do that.
func TestNotifyListenerBehindPgBouncer(t *testing.T) {
	db := dbtest.PgBouncer(t)
	ctx := context.Background()
	listener, err := pgxoutbox.NewListener(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := dbtest.NewLogs()
	rec := &coretest.Recorder{}
	relay, pub := pooled(t, db, listener, logger, rec)
	runUntilCleanup(t, relay)
	waitFor(t, 10*time.Second, "the listener's check", func() bool {
		return len(logs.Lines(slog.LevelInfo, "listening for notifications")) == 1
	})
	if st := relay.NotifyStatus(); !st.Listening || st.Err != nil {
		t.Errorf("NotifyStatus %+v, want listening", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := range 5 {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Publish(ctx, tx, order{ID: i}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for len(rec.Delivered()) < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("message %d not delivered 10 s into the test: the relay waits for its 30 s poll, no notification woke it", i)
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("commit through PgBouncer to delivery, woken by NOTIFY: %v", time.Since(start))
	}
	for _, text := range []string{"Notify", "listener"} {
		if got := logs.Lines(slog.LevelWarn, text); len(got) != 0 {
			t.Errorf("Warn lines: %v", got)
		}
	}
}

// A listener pointed at the pooler by mistake is no better than Config.DB there: the
// engine says so at Warn and polls.
func TestNotifyListenerThroughThePoolerIsDetected(t *testing.T) {
	db := dbtest.PgBouncer(t)
	listener, err := pgxoutbox.NewListener(dbtest.PgBouncerURL())
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := dbtest.NewLogs()
	relay, _ := pooled(t, db, listener, logger, &coretest.Recorder{})
	runUntilCleanup(t, relay)
	notifyNotWorking(t, logs, relay, 20*time.Second, "pooler")
}

// notifyNotWorking waits for the Warn that Notify is not working and checks that it names
// cause, and that NotifyStatus says the engine does not listen.
func notifyNotWorking(t *testing.T, logs *dbtest.Logs, relay *core.Outboxer, within time.Duration, cause string) {
	t.Helper()
	waitFor(t, within, "a Warn that Notify is not working", func() bool {
		return len(logs.Lines(slog.LevelWarn, "Notify is NOT working")) > 0
	})
	if w := logs.Lines(slog.LevelWarn, "Notify is NOT working")[0]; !strings.Contains(w.Attrs["err"], cause) {
		t.Errorf("the Warn says %v; want %q named", w.Attrs, cause)
	}
	if st := relay.NotifyStatus(); st.Listening || !errors.Is(st.Err, core.ErrNotifyNotListening) {
		t.Errorf("NotifyStatus %+v, want not listening, with ErrNotifyNotListening", st)
	}
}

func TestNewListenerRefusesABadDSN(t *testing.T) {
	if _, err := pgxoutbox.NewListener("postgres://a b"); err == nil {
		t.Fatal("NewListener accepted a malformed DSN")
	}
}
