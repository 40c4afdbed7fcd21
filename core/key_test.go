package core_test

import (
	"testing"

	"github.com/outboxer-go/outboxer/core"
)

func TestMessageKey(t *testing.T) {
	// The Watermill sink has always given row 42 of outboxer_messages this UUID: the key
	// must stay what consumers already stored.
	if got, want := core.MessageKey("", "outboxer_messages", 42), "14eed6bb-65bb-50de-9bca-bd02418bed68"; got != want {
		t.Errorf("MessageKey = %s, want %s", got, want)
	}
	seen := map[string]string{}
	for _, c := range []struct {
		source, table string
		id            int64
	}{{"", "t", 1}, {"", "t", 2}, {"", "u", 1}, {"db1", "t", 1}, {"db2", "t", 1}, {"db1", "t", 11}, {"db1/t", "1", 1}} {
		k := core.MessageKey(c.source, c.table, c.id)
		if len(k) != 36 || k[14] != '5' {
			t.Errorf("MessageKey(%q, %q, %d) = %q: not a version 5 UUID", c.source, c.table, c.id, k)
		}
		if k != core.MessageKey(c.source, c.table, c.id) {
			t.Errorf("MessageKey(%q, %q, %d) is not stable", c.source, c.table, c.id)
		}
		name := c.source + "|" + c.table
		if prev, dup := seen[k]; dup {
			t.Errorf("MessageKey(%q, %q, %d) = MessageKey of %s", c.source, c.table, c.id, prev)
		}
		seen[k] = name
	}
	if k, ok := core.KeyFromHeaders(map[string]string{core.HeaderKey: "abc"}); !ok || k != "abc" {
		t.Errorf("KeyFromHeaders = %q, %v", k, ok)
	}
	if _, ok := core.KeyFromHeaders(map[string]string{"x": "y"}); ok {
		t.Error("KeyFromHeaders found a key in headers without one")
	}
}
