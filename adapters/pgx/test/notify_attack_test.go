package pgxoutbox_test

// The Notify listener's session killed, pointed at the wrong
// place, shared, on channels of awkward names, and NotifyStatus read meanwhile.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	"github.com/outboxer-go/outboxer/dbtest"
)

// direct returns a relay instance (polling every hour: only a notification delivers
// within a test) and a publish-only one on schema, both with Notify; the relay listens
// through listener.
func direct(t *testing.T, db *sql.DB, schema string, listener core.NotifyListener, logger *slog.Logger, rec core.Relay, poll time.Duration) (relay, pub *core.Outboxer) {
	t.Helper()
	relay, err := core.New(core.Config{DB: db, Schema: schema, Notify: true, NotifyListener: listener, Logger: logger, Name: schema,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, PollInterval: poll}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	pub, err = core.New(core.Config{DB: db, Schema: schema, Notify: true, PublishOnly: true,
		Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	if err != nil {
		t.Fatal(err)
	}
	return relay, pub
}

func publishOne(t *testing.T, db *sql.DB, pub *core.Outboxer, id int) core.Envelope {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := pub.Publish(ctx, tx, order{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return env
}

func listeningLines(logs *dbtest.Logs) int {
	return len(logs.Lines(slog.LevelInfo, "listening for notifications"))
}

// The listener's session is killed on the server (pg_terminate_backend of its own pid,
// found by its application_name): the engine reconnects, checks the new session, and
// wakes the workers, so a message committed while no session listened is delivered
// without waiting for the hour-long poll; NotifyStatus, read all along from other
// goroutines, goes from listening to not and back.
func TestAttackNotifyListenerKilled(t *testing.T) {
	db := dbtest.Postgres(t)
	app := "outboxer_attack_" + strings.ToLower(rand.Text())
	listener, err := pgxoutbox.NewListener(dbtest.PostgresURL() + "&application_name=" + app)
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := dbtest.NewLogs()
	rec := &coretest.Recorder{}
	relay, pub := direct(t, db.DB, db.Schema, listener, logger, rec, time.Hour)
	runUntilCleanup(t, relay)
	waitFor(t, 20*time.Second, "the first session's check", func() bool { return listeningLines(logs) == 1 })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seenDown sync.Once
	down := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if st := relay.NotifyStatus(); !st.Listening && st.Err != nil {
					seenDown.Do(func() { close(down) })
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	ctx := context.Background()
	for kill := 1; kill <= 2; kill++ {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("kill %d: %d sessions of the listener, want 1", kill, n)
		}
		env := publishOne(t, db.DB, pub, kill)
		waitFor(t, 30*time.Second, "delivery after the listener was killed", func() bool { return len(rec.Delivered()) == kill })
		if got := rec.Delivered()[kill-1].ID; got != env.ID {
			t.Errorf("delivered %d, want %d", got, env.ID)
		}
		waitFor(t, 30*time.Second, "a new session checked", func() bool { return listeningLines(logs) == kill+1 })
		if st := relay.NotifyStatus(); !st.Listening || st.Err != nil {
			t.Errorf("NotifyStatus after reconnecting: %+v", st)
		}
	}
	select {
	case <-down:
	case <-time.After(10 * time.Second):
		t.Error("NotifyStatus never said the listener was down")
	}
	lost := logs.Lines(slog.LevelWarn, "lost its connection")
	if len(lost) != 2 || lost[0].Attrs["outboxer"] != db.Schema {
		t.Errorf("Warn lines for the lost session: %v, want two naming the instance %q", lost, db.Schema)
	}
	// And notifications work on the new session.
	env := publishOne(t, db.DB, pub, 3)
	waitFor(t, 30*time.Second, "delivery through the new session", func() bool { return len(rec.Delivered()) == 3 })
	if got := rec.Delivered()[2].ID; got != env.ID {
		t.Errorf("delivered %d, want %d", got, env.ID)
	}
}

// The listener pointed at a port nothing listens on: every failure to connect is a Warn
// naming the instance, NotifyStatus says why, and delivery goes on by polling.
func TestAttackNotifyListenerWrongPort(t *testing.T) {
	db := dbtest.Postgres(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	listener, err := pgxoutbox.NewListener("postgres://postgres@" + addr + "/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := dbtest.NewLogs()
	rec := &coretest.Recorder{}
	relay, pub := direct(t, db.DB, db.Schema, listener, logger, rec, 100*time.Millisecond)
	runUntilCleanup(t, relay)
	waitFor(t, 30*time.Second, "two Warn lines about the listener", func() bool {
		return len(logs.Lines(slog.LevelWarn, "listener")) >= 2
	})
	for _, w := range logs.Lines(slog.LevelWarn, "listener") {
		if !strings.Contains(w.Attrs["err"], "refused") || w.Attrs["outboxer"] != db.Schema {
			t.Errorf("Warn %v; want the refusal and the instance named", w.Attrs)
		}
	}
	if st := relay.NotifyStatus(); st.Listening || st.Err == nil || !strings.Contains(st.Err.Error(), "refused") {
		t.Errorf("NotifyStatus %+v, want not listening, with the refusal", st)
	}
	if n := listeningLines(logs); n != 0 {
		t.Errorf("%d lines claim the engine listens", n)
	}
	env := publishOne(t, db.DB, pub, 1)
	waitFor(t, 30*time.Second, "delivery by polling", func() bool { return len(rec.Delivered()) == 1 })
	if got := rec.Delivered()[0].ID; got != env.ID {
		t.Errorf("delivered %d, want %d", got, env.ID)
	}
}

// The listener pointed at another database of the same server: LISTEN works there, but
// the engine's notifications never reach it. The test notification catches it.
func TestAttackNotifyListenerWrongDatabase(t *testing.T) {
	db := dbtest.Postgres(t)
	listener, err := pgxoutbox.NewListener(strings.Replace(dbtest.PostgresURL(), "/test?", "/postgres?", 1))
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := dbtest.NewLogs()
	relay, _ := direct(t, db.DB, db.Schema, listener, logger, &coretest.Recorder{}, time.Second)
	runUntilCleanup(t, relay)
	notifyNotWorking(t, logs, relay, 30*time.Second, "test notification did not arrive")
	if n := listeningLines(logs); n != 0 {
		t.Errorf("%d lines claim the engine listens", n)
	}
}

// A schema whose name needs quoting (mixed case) and is as long as allowed (63), so
// that the channel name is cut at PostgreSQL's 63 bytes: publishing, LISTEN and the
// check agree on the channel, and a commit wakes the relay.
func TestAttackNotifyAwkwardSchemaName(t *testing.T) {
	base := dbtest.Postgres(t)
	ctx := context.Background()
	schema := "Attack_" + strings.ToUpper(rand.Text())
	schema += strings.Repeat("x", 63-len(schema))
	if _, err := base.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = base.ExecContext(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`) })
	listener, err := pgxoutbox.NewListener(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := dbtest.NewLogs()
	rec := &coretest.Recorder{}
	relay, pub := direct(t, base.DB, schema, listener, logger, rec, time.Hour)
	runUntilCleanup(t, relay)
	waitFor(t, 20*time.Second, "the session's check", func() bool { return listeningLines(logs) == 1 })
	for i := range 3 {
		env := publishOne(t, base.DB, pub, i)
		waitFor(t, 30*time.Second, "a wake-up by NOTIFY", func() bool { return len(rec.Delivered()) == i+1 })
		if got := rec.Delivered()[i].ID; got != env.ID {
			t.Errorf("delivered %d, want %d", got, env.ID)
		}
	}
}

// One NotifyListener value shared by two instances on two schemas: each gets its own
// sessions, each is woken by its own commits.
func TestAttackNotifySharedListener(t *testing.T) {
	listener, err := pgxoutbox.NewListener(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	type inst struct {
		db       *dbtest.DB
		logs     *dbtest.Logs
		rec      *coretest.Recorder
		pub      *core.Outboxer
		delivers int
	}
	var all []*inst
	for range 2 {
		in := &inst{db: dbtest.Postgres(t), rec: &coretest.Recorder{}}
		var logger *slog.Logger
		in.logs, logger = dbtest.NewLogs()
		var relay *core.Outboxer
		relay, in.pub = direct(t, in.db.DB, in.db.Schema, listener, logger, in.rec, time.Hour)
		runUntilCleanup(t, relay)
		all = append(all, in)
	}
	for _, in := range all {
		waitFor(t, 20*time.Second, "each instance's check", func() bool { return listeningLines(in.logs) == 1 })
	}
	for round := range 2 {
		for _, in := range all {
			env := publishOne(t, in.db.DB, in.pub, round)
			waitFor(t, 30*time.Second, "a wake-up by NOTIFY", func() bool { return len(in.rec.Delivered()) == round+1 })
			if got := in.rec.Delivered()[round].ID; got != env.ID {
				t.Errorf("delivered %d, want %d", got, env.ID)
			}
		}
	}
}
