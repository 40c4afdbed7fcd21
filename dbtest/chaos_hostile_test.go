package dbtest_test

// Reliability scenario 9, through real databases: hostile group keys, types and headers
// are stored and relayed exactly as given, or refused with ErrInvalidMessage before any
// statement runs (so the caller's transaction stays usable). The fuzz targets in the
// core (core/fuzz_test.go) cover configuration, backoff and codecs without a database.

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

type hostileCase struct {
	name    string
	group   string
	typ     string
	headers map[string]string
}

var hostileAccepted = []hostileCase{
	{"sql in every field", `'; DROP TABLE outboxer_messages;--`, `x"); DELETE FROM y;--`, map[string]string{`"k'`: "`v`; --", "a\\b": `\"\n\t`}},
	{"unicode", "ordre:é✓📦", "événement.Créé", map[string]string{"clé": "valeur ✓", "emoji": "📦🚚", "ключ": "значение", "中文": "值"}},
	{"nul in headers", "g", "t", map[string]string{"a\x00b": "c\x00d", "nul": "\x00"}},
	{"control characters", "g\x01\x1f\x7f", "t\t\n", map[string]string{"\r\n": "\x1b[31m"}},
	{"longest group key and type", strings.Repeat("k", core.MaxGroupKeyLen), strings.Repeat("t", core.MaxTypeLen), nil},
	{"longest group key in 4-byte runes", strings.Repeat("📦", core.MaxGroupKeyLen/4), "t", nil},
	{"big header values", "g", "t", map[string]string{"big": strings.Repeat("v", 16<<10), "big2": strings.Repeat("é", 8<<10)}},
	{"headers at the limit", "g", "t", map[string]string{"big": strings.Repeat("v", core.MaxHeadersBytes-len(`{"big":""}`))}},
	{"many headers", "g", "t", manyHeaders(300)},
	{"empty everything", "", "t", map[string]string{"": ""}},
	{"json-looking", `{"a":1}`, "[1,2]", map[string]string{`{"k":"v"}`: `[null]`, "null": "null"}},
}

var hostileRefused = []hostileCase{
	{"nul in group key", "a\x00b", "t", nil},
	{"invalid utf-8 group key", "a\xffb", "t", nil},
	{"nul in type", "g", "t\x00", nil},
	{"invalid utf-8 type", "g", "\xc3\x28", nil},
	{"group key too long", strings.Repeat("k", core.MaxGroupKeyLen+1), "t", nil},
	{"type too long", "g", strings.Repeat("t", core.MaxTypeLen+1), nil},
	{"invalid utf-8 header key", "g", "t", map[string]string{"\xff": "v"}},
	{"invalid utf-8 header value", "g", "t", map[string]string{"k": "a\xfe\xffb"}},
	{"headers over 64 KiB", "g", "t", map[string]string{"big": strings.Repeat("v", core.MaxHeadersBytes)}},
}

func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[strings.Repeat("h", i%40)+string(rune('A'+i%26))+strings.Repeat("x", i/26)] = strings.Repeat("v", i)
	}
	return h
}

func TestChaosHostileInputRoundTrips(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}}})
		score := dbtest.Score{Scenario: "9 hostile input", Variant: "group keys, types, headers", Database: string(db.Dialect)}
		committed := map[int64]string{}
		defer func() {
			var seen []dbtest.Delivery
			for _, e := range rec.delivered() {
				seen = append(seen, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
			}
			score = dbtest.Tally(score, committed, seen)
			dbtest.Record(t, score)
		}()

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		want := map[int64]hostileCase{}
		publishOne := func(c hostileCase) (core.Envelope, error) {
			score.Published++
			return ob.Publish(ctx, tx, core.Raw{To: "orders", Type: c.typ, Key: c.group, Data: []byte(`{}`), Header: c.headers})
		}
		for i, c := range hostileAccepted {
			env, err := publishOne(c)
			if err != nil {
				t.Errorf("%s: Publish: %v", c.name, err)
				continue
			}
			want[env.ID] = c
			committed[env.ID] = c.group
			// A refused message between the accepted ones must leave the transaction usable.
			r := hostileRefused[i%len(hostileRefused)]
			if _, err := publishOne(r); !errors.Is(err, core.ErrInvalidMessage) {
				t.Errorf("%s: Publish: %v, want ErrInvalidMessage", r.name, err)
			}
		}
		for _, r := range hostileRefused {
			if _, err := publishOne(r); !errors.Is(err, core.ErrInvalidMessage) {
				t.Errorf("%s: Publish: %v, want ErrInvalidMessage", r.name, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit after the refusals: %v", err)
		}

		check := func(where string, e core.Envelope) {
			t.Helper()
			c, ok := want[e.ID]
			if !ok {
				t.Errorf("%s: message %d was never accepted", where, e.ID)
				return
			}
			if e.GroupKey != c.group || e.Type != c.typ {
				t.Errorf("%s: %s: group %q type %q, want %q %q", where, c.name, e.GroupKey, e.Type, c.group, c.typ)
			}
			if !maps.Equal(e.Headers, c.headers) && (len(e.Headers) != 0 || len(c.headers) != 0) {
				t.Errorf("%s: %s: headers differ: got %d, want %d", where, c.name, len(e.Headers), len(c.headers))
				for k, v := range c.headers {
					if got, ok := e.Headers[k]; !ok || got != v {
						t.Errorf("%s: %s: header %q = %q (present %v), want %q", where, c.name, k, trunc(got), ok, trunc(v))
						break
					}
				}
			}
		}
		pending, err := ob.ListPending(ctx, "orders", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != len(want) {
			t.Errorf("%d pending, want the %d accepted", len(pending), len(want))
		}
		for _, e := range pending {
			check("stored", e)
		}
		if _, err := ob.Drain(ctx, "orders"); err != nil {
			t.Fatalf("Drain: %v", err)
		}
		delivered := rec.delivered()
		if len(delivered) != len(want) {
			t.Errorf("%d delivered, want %d", len(delivered), len(want))
		}
		for _, e := range delivered {
			check("delivered", e)
		}
		score.Notes = "accepted exactly: SQL text, unicode, NUL and control characters in headers, 255-byte keys and types, 24 KiB headers; refused before any statement: NUL or invalid UTF-8 in keys and types, invalid UTF-8 in headers, keys or types over 255 bytes, headers over 64 KiB of JSON (MariaDB's TEXT column)"
	})
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
