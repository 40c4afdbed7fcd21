package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// TestForeignPolicies: SkipForeign reports a message without a key as a warning
// naming the consumer, the message and the error, and lets it pass; StopOnForeign
// refuses it with the helper's error, or ErrNoKey when it has none. The helpers'
// default reports to the inbox's logger.
func TestForeignPolicies(t *testing.T) {
	t.Parallel()
	noKey := fmt.Errorf("kafka: record orders/0@3: %w", inbox.ErrNoKey)
	m := inbox.ForeignMessage{Consumer: "billing", ID: "orders/0@3", Payload: []byte("legacy"), Err: noKey}
	ctx := context.Background()

	logs, logger := dbtest.NewLogs()
	if err := inbox.SkipForeign(logger)(ctx, m); err != nil {
		t.Errorf("SkipForeign = %v, want nil", err)
	}
	l := logs.Lines(slog.LevelWarn, "without a key")
	if len(l) != 1 || l[0].Attrs["consumer"] != "billing" || l[0].Attrs["message"] != "orders/0@3" || l[0].Attrs["err"] != noKey.Error() {
		t.Errorf("SkipForeign logged %v, want one warning naming billing, orders/0@3 and the error\n%s", l, logs)
	}
	if err := inbox.SkipForeign(nil)(ctx, m); err != nil {
		t.Errorf("SkipForeign(nil) = %v, want nil", err)
	}

	if err := inbox.StopOnForeign(ctx, m); err != noKey {
		t.Errorf("StopOnForeign = %v, want the helper's error %v", err, noKey)
	}
	if err := inbox.StopOnForeign(ctx, inbox.ForeignMessage{}); !errors.Is(err, inbox.ErrNoKey) {
		t.Errorf("StopOnForeign without an error = %v, want inbox.ErrNoKey", err)
	}
	if s := inbox.Foreign.String(); s != "foreign" {
		t.Errorf("Foreign.String() = %q", s)
	}

	db := dbtest.SQLite(t)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if in.Logger() != logger {
		t.Error("Logger() is not Config.Logger")
	}
	if in, err = inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect}); err != nil || in.Logger() != slog.Default() {
		t.Errorf("Logger() without Config.Logger = %v (%v), want slog.Default()", in.Logger(), err)
	}
}
