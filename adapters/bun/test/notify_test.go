package bunoutbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestNotifyOnPgdriver: LISTEN needs a session of its own that database/sql cannot
// give through pgdriver. An instance with Notify on a pgdriver pool says so in
// NotifyStatus (ErrNotifyNotListening, naming the pgx driver and NotifyListener) and
// delivers by polling; with NotifyListener set to pgxoutbox.NewListener it listens.
func TestNotifyOnPgdriver(t *testing.T) {
	t.Parallel()
	for _, withListener := range []bool{false, true} {
		t.Run(map[bool]string{false: "Alone", true: "WithListener"}[withListener], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			db := dbtest.Postgres(t)
			h := openPgdriver(t, db)
			if err := core.Migrate(ctx, h, core.MigrateOptions{}); err != nil {
				t.Fatal(err)
			}
			rec := adaptertest.NewRecorder()
			cfg := core.Config{DB: h, Notify: true,
				Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, PollInterval: 100 * time.Millisecond}}}
			if withListener {
				l, err := pgxoutbox.NewListener(db.DSN)
				if err != nil {
					t.Fatal(err)
				}
				cfg.NotifyListener = l
			}
			ob, err := core.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- ob.Run(runCtx) }()
			defer func() { stop(); <-done }()
			var st core.NotifyStatus
			for st = ob.NotifyStatus(); !st.Listening && st.Err == nil; st = ob.NotifyStatus() {
				select {
				case <-ctx.Done():
					t.Fatalf("no notify status: %v", ctx.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
			if withListener {
				if !st.Listening {
					t.Fatalf("NotifyStatus with pgxoutbox.NewListener: %+v, want Listening", st)
				}
			} else {
				if st.Listening || !errors.Is(st.Err, core.ErrNotifyNotListening) ||
					!strings.Contains(st.Err.Error(), "pgx") || !strings.Contains(st.Err.Error(), "NotifyListener") {
					t.Fatalf("NotifyStatus on pgdriver: %+v, want ErrNotifyNotListening naming pgx and NotifyListener", st)
				}
			}
			if _, err := ob.Publish(ctx, h, adaptertest.Event{OrderID: 1}); err != nil {
				t.Fatal(err)
			}
			for len(rec.Got()) == 0 {
				select {
				case <-ctx.Done():
					t.Fatalf("not delivered: %v", ctx.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
}
