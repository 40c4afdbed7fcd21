package dbtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestRelayErrorsOfAnyBytesAreRecorded: a relay's error text is whatever its broker or
// library wrote: a NUL byte (refused by PostgreSQL in text), invalid UTF-8 (refused by
// MariaDB), or a long message whose 2,000-byte cut fell inside a character. Each must be
// recorded as the message's failure, and the message go dead after MaxAttempts; before,
// recording the failure failed, the message was delivered again forever and its
// partition stood still.
func TestRelayErrorsOfAnyBytesAreRecorded(t *testing.T) {
	cases := map[string]string{
		"nul":          "broker said \x00 no",
		"invalid utf8": "broker said \xff\xfe no",
		"cut":          strings.Repeat("a", 1999) + "é and more",
	}
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		for name, text := range cases {
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				table := "errtext_" + strings.ReplaceAll(name, " ", "_")
				relay := core.RelayFunc(func(context.Context, []core.Envelope) error { return errors.New(text) })
				ob := setup(t, db, core.Config{Table: table, Outboxes: map[string]core.OutboxConfig{"orders": {
					Relay: relay, MaxAttempts: 2, PollInterval: 10 * time.Millisecond,
					Backoff: core.Backoff{Func: func(int) time.Duration { return 10 * time.Millisecond }}}}})
				publish(t, ob, db.DB, event{Seq: 1})
				run(t, ob)
				eventually(t, 30*time.Second, "the message dead", func() bool { return counts(t, ob, "orders").Dead == 1 })
				dead, err := ob.ListDead(ctx, "orders", 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) != 1 {
					t.Fatalf("%d dead, want 1", len(dead))
				}
				got := dead[0].LastError
				if !utf8.ValidString(got) || strings.Contains(got, "\x00") || len(got) > 2000 || !strings.HasPrefix(got, text[:10]) {
					t.Fatalf("last error %q (%d bytes): want valid UTF-8 without NUL, at most 2000 bytes, starting as the relay's", got, len(got))
				}
			})
		}
	})
}
