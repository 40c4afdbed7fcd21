package dbtest_test

// Notify behind a pooler in transaction mode. LISTEN on a connection of
// Config.DB does not stay on a server session there; the engine must notice, say so
// loudly and poll, not wait silently.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// The engine runs through PgBouncer in transaction mode; with Notify listening on a
// connection of that same handle, the check of the session fails, a Warn says Notify is
// not working, and messages are delivered by polling.
func TestNotifyThroughAPoolerWarnsAndPolls(t *testing.T) {
	db := dbtest.PgBouncer(t)
	ctx := context.Background()
	logs, logger := dbtest.NewLogs()
	rec := &recorder{}
	relay := setup(t, db, core.Config{Schema: db.Schema, Notify: true, Logger: logger, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: rec, Partitions: 2, PollInterval: 200 * time.Millisecond}}})
	pub := setup(t, db, core.Config{Schema: db.Schema, Notify: true, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Partitions: 2}}})
	run(t, relay)
	eventually(t, 30*time.Second, "a Warn that Notify is not working", func() bool {
		return len(logs.Lines(slog.LevelWarn, "Notify is NOT working")) > 0
	})
	warn := logs.Lines(slog.LevelWarn, "Notify is NOT working")[0]
	t.Logf("the Warn: %s %v", warn.Message, warn.Attrs)
	if !strings.Contains(warn.Attrs["err"], "pooler") || !strings.Contains(warn.Attrs["err"], "Notify is not listening") {
		t.Errorf("the Warn says %v; want the reason (a session not kept, a pooler?)", warn.Attrs)
	}
	if got := logs.Lines(slog.LevelInfo, "listening for notifications"); len(got) != 0 {
		t.Errorf("the engine claims to listen through the pooler: %v", got)
	}
	if st := relay.NotifyStatus(); st.Listening || !errors.Is(st.Err, core.ErrNotifyNotListening) {
		t.Errorf("NotifyStatus %+v, want not listening, with ErrNotifyNotListening", st)
	}
	// Delivery goes on by polling, in order.
	var envs []core.Envelope
	for i := range 5 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, publish(t, pub, tx, event{Seq: i, Group: "g"})...)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "delivery by polling", func() bool { return len(rec.delivered()) == len(envs) })
	for i, e := range rec.delivered() {
		if e.ID != envs[i].ID {
			t.Fatalf("delivery %d is message %d, want %d", i, e.ID, envs[i].ID)
		}
	}
}

// Directly on PostgreSQL, the same configuration passes the check: the engine says it
// listens, and warns of nothing.
func TestNotifySessionCheckPassesOnADirectConnection(t *testing.T) {
	db := dbtest.Postgres(t)
	logs, logger := dbtest.NewLogs()
	relay := setup(t, db, core.Config{Notify: true, Logger: logger, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: &recorder{}, PollInterval: time.Hour}}})
	if st := relay.NotifyStatus(); st != (core.NotifyStatus{}) {
		t.Errorf("NotifyStatus before Run: %+v, want the zero value", st)
	}
	stop := run(t, relay)
	eventually(t, 30*time.Second, "the listener's check passed", func() bool {
		return len(logs.Lines(slog.LevelInfo, "listening for notifications")) == 1
	})
	if st := relay.NotifyStatus(); !st.Listening || st.Err != nil || st.Since.IsZero() {
		t.Errorf("NotifyStatus %+v, want listening", st)
	}
	for _, text := range []string{"Notify", "listener"} {
		if got := logs.Lines(slog.LevelWarn, text); len(got) != 0 {
			t.Errorf("Warn lines on a direct connection: %v", got)
		}
	}
	stop()
	if st := relay.NotifyStatus(); st != (core.NotifyStatus{}) {
		t.Errorf("NotifyStatus after Run: %+v, want the zero value", st)
	}
}

// Through a pool of one server connection, LISTEN and the check of pg_listening_channels()
// run on the same server session, so the channels look kept; the test notification then
// reaches whichever client that session serves at the time, not the listener. The
// engine must still see that Notify does not work.
func TestNotifyTestNotificationCatchesASessionThatLooksKept(t *testing.T) {
	db := dbtest.PgBouncerOneServer(t)
	logs, logger := dbtest.NewLogs()
	rec := &recorder{}
	relay := setup(t, db, core.Config{Schema: db.Schema, Notify: true, Logger: logger, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: rec, PollInterval: 100 * time.Millisecond}}})
	run(t, relay)
	eventually(t, 30*time.Second, "a Warn that Notify is not working", func() bool {
		return len(logs.Lines(slog.LevelWarn, "Notify is NOT working")) > 0
	})
	warn := logs.Lines(slog.LevelWarn, "Notify is NOT working")[0]
	if !strings.Contains(warn.Attrs["err"], "test notification did not arrive") {
		t.Errorf("the Warn says %v; want the test notification named", warn.Attrs)
	}
	if got := logs.Lines(slog.LevelInfo, "listening for notifications"); len(got) != 0 {
		t.Errorf("the engine claims to listen: %v", got)
	}
	if st := relay.NotifyStatus(); st.Listening || !errors.Is(st.Err, core.ErrNotifyNotListening) {
		t.Errorf("NotifyStatus %+v, want not listening, with ErrNotifyNotListening", st)
	}
	env := publish(t, relay, db.DB, event{Seq: 1})
	eventually(t, 30*time.Second, "delivery by polling", func() bool {
		d := rec.delivered()
		return len(d) == 1 && d[0].ID == env[0].ID
	})
}
