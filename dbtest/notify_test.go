package dbtest_test

import (
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A notification wakes the outbox it names even when the name holds a colon, the
// separator of its partition list: a notification for "a:b" once woke the workers of
// outbox "a" instead, and those of "a:b" slept until their next poll.
func TestNotifyWakesAnOutboxWithAColonInItsName(t *testing.T) {
	db := dbtest.Postgres(t)
	a, ab := &recorder{}, &recorder{}
	// A table of its own, so that the channel it listens on is the test's.
	relay := setup(t, db, core.Config{Table: "colon_messages", Notify: true, Outboxes: map[string]core.OutboxConfig{
		"a":   {Relay: a, PollInterval: time.Hour}, // only a notification can wake them
		"a:b": {Relay: ab, PollInterval: time.Hour},
	}})
	pub := setup(t, db, core.Config{Table: "colon_messages", PublishOnly: true, Notify: true, Outboxes: map[string]core.OutboxConfig{
		"a": {}, "a:b": {},
	}})
	run(t, relay)
	// The relay listens (its first fetches, on listening, found nothing).
	listening(t, db, "colon_messages")
	time.Sleep(200 * time.Millisecond) // the workers are asleep: what follows is woken by a notification
	env := publish(t, pub, db.DB, event{Box: "a:b", Seq: 1})
	eventually(t, 20*time.Second, `the message of "a:b" delivered, woken by its notification`, func() bool {
		return len(ab.delivered()) == 1
	})
	if got := ab.delivered()[0]; got.ID != env[0].ID {
		t.Errorf(`the relay of "a:b" delivered %d, want %d`, got.ID, env[0].ID)
	}
	if n := len(a.delivered()); n != 0 {
		t.Errorf(`the relay of "a" delivered %d message(s), want none`, n)
	}
}
