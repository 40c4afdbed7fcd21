package inbox_test

// Attacks on the inbox with hostile keys, consumer names and group keys: what a user
// depends on is that a key is refused with ErrInvalidMessage (and the handler not run)
// or recorded byte for byte, never truncated, folded, padded or normalised into
// another message's key.

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// handles returns the handles a test claims through: on MariaDB also one whose driver
// interpolates the arguments into the statement text instead of preparing it.
func handles(t *testing.T, db *dbtest.DB) map[string]*sql.DB {
	h := map[string]*sql.DB{"prepared": db.DB}
	if db.Dialect == core.MySQL {
		h["interpolated"] = db.Interpolating(t)
	}
	return h
}

// TestAttackHostileKeysRefused: an empty, oversized (past the index limits of every
// database: 3,000 and 70,000 bytes), NUL-holding or invalid UTF-8 key or consumer name
// is refused with ErrInvalidMessage before any write, and the handler does not run.
func TestAttackHostileKeysRefused(t *testing.T) {
	bad := map[string]string{
		"empty":          "",
		"256 bytes":      strings.Repeat("k", inbox.MaxKeyLen+1),
		"3000 bytes":     strings.Repeat("k", 3000),
		"70000 bytes":    strings.Repeat("k", 70000),
		"NUL":            "k\x00",
		"NUL only":       "\x00",
		"invalid UTF-8":  "k\xff",
		"lone surrogate": "k\xed\xa0\x80",
		"cut rune":       strings.Repeat("k", 254) + "é"[:1],
	}
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{StaleCheck: true})
		ctx := context.Background()
		ran := 0
		h := func(context.Context, *sql.Tx, inbox.Outcome) error { ran++; return nil }
		for name, s := range bad {
			if _, err := in.Handle(ctx, "billing", inbox.Message{Key: s}, h); !errors.Is(err, inbox.ErrInvalidMessage) {
				t.Errorf("key %s: %v, want ErrInvalidMessage", name, err)
			}
			if _, err := in.Handle(ctx, s, inbox.Message{Key: "k"}, h); !errors.Is(err, inbox.ErrInvalidMessage) {
				t.Errorf("consumer %s: %v, want ErrInvalidMessage", name, err)
			}
			if name == "empty" {
				continue // an empty group is no group: not checked
			}
			g := s
			if len(g) > inbox.MaxKeyLen && len(g) <= inbox.MaxGroupLen {
				continue // a fine group
			}
			if _, err := in.Handle(ctx, "billing", inbox.Message{Key: "g:" + name, Group: g, Seq: 1}, h); !errors.Is(err, inbox.ErrInvalidMessage) {
				t.Errorf("group %s: %v, want ErrInvalidMessage", name, err)
			}
		}
		if ran != 0 {
			t.Errorf("the handler ran %d times for refused messages", ran)
		}
		if n := count(t, db, `SELECT count(*) FROM outboxer_inbox`); n != 0 {
			t.Errorf("%d records written for refused messages", n)
		}
		if n := count(t, db, `SELECT count(*) FROM outboxer_inbox_groups`); n != 0 {
			t.Errorf("%d group marks written for refused messages", n)
		}
	})
}

// TestAttackKeysByteForByte: keys that a collation, a PAD SPACE comparison, case
// folding, Unicode normalisation or truncation at the column's length would make equal
// are different messages; each is claimed once, then caught as a duplicate, on every
// database and (MariaDB) with prepared and interpolated statements alike.
func TestAttackKeysByteForByte(t *testing.T) {
	long := strings.Repeat("é", inbox.MaxKeyLen/2) // 254 bytes of 2-byte runes
	keys := []string{
		"k", "k ", "K", "k\t", " k", "k  ", "k\n", "k\u00a0", // padding and case
		"\u00e9", "e\u0301", "\u00c9", "E\u0301", // NFC and NFD é, É
		"\ufb01", "fi", "\u212b", "\u00c5", // compatibility and canonical equivalents
		"ß", "ss", "ı", "i", "İ", // language folds
		"😀", "😁", "\U0001f600 ", // 4-byte runes (not in MariaDB's 3-byte utf8)
		long, long + "k", long[:252] + "ab", // at the length limit, differing in the last byte
		strings.Repeat("x", inbox.MaxKeyLen), strings.Repeat("x", inbox.MaxKeyLen-1) + "y",
	}
	for _, k := range keys {
		if len(k) > inbox.MaxKeyLen {
			t.Fatalf("test key of %d bytes", len(k))
		}
	}
	consumers := []string{"billing", "Billing", "billing ", strings.Repeat("c", inbox.MaxConsumerLen), "c\u0301", "\u0107"}
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{})
		for hname, h := range handles(t, db) {
			for _, c := range consumers {
				c := hname + "/" + c
				if len(c) > inbox.MaxConsumerLen {
					c = c[:inbox.MaxConsumerLen]
				}
				for _, k := range keys {
					if o := claim(t, in, h, c, inbox.Message{Key: k}, true); o != inbox.Claimed {
						t.Errorf("%s: consumer %q key %q (% x): %v, want claimed: another key was taken for it", hname, c, k, k, o)
					}
				}
				for _, k := range keys {
					if o := claim(t, in, h, c, inbox.Message{Key: k}, true); o != inbox.Duplicate {
						t.Errorf("%s: consumer %q key %q again: %v, want duplicate", hname, c, k, o)
					}
				}
			}
		}
		want := len(handles(t, db)) * len(consumers) * len(keys)
		if n := count(t, db, `SELECT count(*) FROM outboxer_inbox`); n != want {
			t.Errorf("%d records, want %d", n, want)
		}
		// What was stored is what was claimed: read the keys back.
		rows, err := db.Query(`SELECT DISTINCT msg_key FROM outboxer_inbox`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]bool{}
		for rows.Next() {
			var k []byte
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			got[string(k)] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !got[k] {
				t.Errorf("key %q (% x) is not stored as claimed", k, k)
			}
		}
		if len(got) != len(keys) {
			t.Errorf("%d distinct keys stored, want %d", len(got), len(keys))
		}
	})
}

// TestAttackGroupsByteForByte: with the stale check, groups that differ only in
// trailing spaces, case or normalisation keep marks of their own: a message of one is
// never reported stale because of another's, and each is stale against its own mark.
func TestAttackGroupsByteForByte(t *testing.T) {
	groups := []string{
		inbox.GroupOf("orders", "k"), inbox.GroupOf("orders", "k "), inbox.GroupOf("orders", "K"),
		inbox.GroupOf("Orders", "k"), inbox.GroupOf("orders", "\u00e9"), inbox.GroupOf("orders", "e\u0301"),
		inbox.GroupOf("orders", strings.Repeat("g", inbox.MaxGroupLen-len("orders/"))),
		inbox.GroupOf("orders", strings.Repeat("g", inbox.MaxGroupLen-len("orders/")-1)+"h"),
	}
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{StaleCheck: true})
		for hname, h := range handles(t, db) {
			seq := int64(100)
			for i, g := range groups {
				// Each group's first message has a lower Seq than the previous group's:
				// were two groups one, it would be stale.
				seq--
				k := hname + "/first/" + string(rune('a'+i))
				if o := claim(t, in, h, "billing", inbox.Message{Key: k, Group: g, Seq: seq}, true); o != inbox.Claimed {
					t.Errorf("%s: first message of group %q (seq %d): %v, want claimed", hname, g, seq, o)
				}
			}
			for i, g := range groups {
				k := hname + "/older/" + string(rune('a'+i))
				if o := claim(t, in, h, "billing", inbox.Message{Key: k, Group: g, Seq: 1}, true); o != inbox.Stale {
					t.Errorf("%s: older message of group %q: %v, want stale", hname, g, o)
				}
			}
			if _, err := h.Exec(`DELETE FROM outboxer_inbox_groups`); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestAttackGroupOfOutboxWithSlash: an outbox name may hold a '/' (it is any text of up
// to 200 bytes), and so may a group key. Outbox "orders/eu" with group key "x" and
// outbox "orders" with group key "eu/x" are two groups, whose IDs the stale check must
// not compare: the second's messages are not stale for the first's.
func TestAttackGroupOfOutboxWithSlash(t *testing.T) {
	pairs := [][2][2]string{
		{{"orders/eu", "x"}, {"orders", "eu/x"}},
		{{"a/b/c", "d"}, {"a/b", "c/d"}},
		{{"a%2Fb", "c"}, {"a/b", "c"}},
		{{"a%", "2Fb/c"}, {"a/b", "c"}},
	}
	for _, p := range pairs {
		if a, b := inbox.GroupOf(p[0][0], p[0][1]), inbox.GroupOf(p[1][0], p[1][1]); a == b {
			t.Errorf("GroupOf%q = GroupOf%q = %q", p[0], p[1], a)
		}
	}
	// Names without '/' or '%' keep their groups (marks written before stay theirs).
	if g := inbox.GroupOf("orders", "order:1/2"); g != "orders/order:1/2" {
		t.Errorf("GroupOf(orders, order:1/2) = %q", g)
	}
	// The longest outbox name (200 bytes) and group key (255 bytes) fit.
	if g := inbox.GroupOf(strings.Repeat("o", 200), strings.Repeat("g", core.MaxGroupKeyLen)); len(g) > inbox.MaxGroupLen {
		t.Errorf("GroupOf of the longest names: %d bytes, more than MaxGroupLen", len(g))
	}
	db := dbtest.SQLite(t)
	in := setup(t, db, inbox.Config{StaleCheck: true})
	a := inbox.Message{Key: "a", Group: inbox.GroupOf("orders/eu", "x"), Seq: 100}
	b := inbox.Message{Key: "b", Group: inbox.GroupOf("orders", "eu/x"), Seq: 5}
	claim(t, in, db.DB, "billing", a, true)
	if o := claim(t, in, db.DB, "billing", b, true); o != inbox.Claimed {
		t.Errorf("message 5 of outbox orders, group eu/x, after message 100 of outbox orders/eu, group x: %v, want claimed", o)
	}
}
