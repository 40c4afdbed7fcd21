package core

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// Fuzz targets for hostile configuration and input (reliability scenario 9). Each has a
// seed corpus, so a plain `go test` runs the seeds as ordinary tests; `go test -fuzz`
// explores from them. Inputs that once broke the package are among the seeds.

// identSeeds are table and schema names a user (or an attacker feeding configuration)
// might pass.
var identSeeds = []string{
	"outboxer_messages", "Orders", "_x", "x1",
	`x"; DROP TABLE y;--`, "a`b", "a b", "a;b", "a'b", `a\b`, "a.b", "a-b", "1abc", "",
	"tablé", "表", "a\x00b", "a\xffb", "a\nb",
	strings.Repeat("a", 53), // the longest table name whose derived names fit 63 bytes
	strings.Repeat("a", 54),
	strings.Repeat("a", 63), // was accepted: its "_leases" table truncated to the table's own name
	strings.Repeat("a", 64),
	strings.Repeat("é", 40),
}

// quotedIdent matches a quoted identifier in any dialect's SQL text.
var quotedIdent = regexp.MustCompile("\"[^\"]*\"|`[^`]*`")

// statementsOf returns every SQL text an instance would run for one table.
func statementsOf(s *dialect.SQL) []string {
	out := append([]string(nil), s.Up()...)
	out = append(out, s.Down()...)
	out = append(out, s.AcquireLease, s.ReadLease, s.RenewLease, s.ReleaseLease, s.EnsureLease, s.FenceLease,
		s.Pause, s.Resume, s.CountLeases, s.DropLeasesFrom, s.AnyPaused, s.ClaimLeases,
		s.FailMessage, s.KillMessage, s.Counts, s.ListPending, s.ListDead, s.RetryDeadAll, s.Prune,
		s.PartitionsInUse, s.LeaseStatus, s.MovePartitions,
		s.LiveLeases, s.Placement, s.Strays, s.ReadShape, s.EnsureShape, s.SetShape)
	q, _ := s.RetryDeadIDs("o", []int64{1, 2})
	out = append(out, q, s.Insert(3, true, false))
	for _, f := range []func(string, []int64) (string, []any){s.DeadPlacement,
		func(o string, ids []int64) (string, []any) { return s.MovePending(o, 1, ids) },
		func(o string, ids []int64) (string, []any) { return s.RetryDeadInto(o, 1, ids) }} {
		q, _ := f("o", []int64{1, 2})
		out = append(out, q)
	}
	if s.Kind == dialect.SQLite {
		out = append(out, s.InsertTimed(2))
	}
	return out
}

// FuzzIdentifiers: New and Migrate either refuse a table or schema name with a
// *ConfigError naming the field, or accept it; an accepted name reaches SQL only quoted,
// every identifier derived from it fits PostgreSQL's 63 bytes (a longer one is silently
// truncated, and can land on another table's name), and the SQL is the SQL of a plain
// name with only the quoted names changed.
func FuzzIdentifiers(f *testing.F) {
	for i, s := range identSeeds {
		f.Add(s, "", uint8(i%3))
		f.Add("outboxer_messages", s, uint8(0))
	}
	dialects := []Dialect{Postgres, MySQL, SQLite}
	f.Fuzz(func(t *testing.T, table, schema string, d uint8) {
		dl := dialects[int(d)%len(dialects)]
		cfg := Config{DB: new(sql.DB), Dialect: dl, Table: table, Schema: schema,
			Outboxes: map[string]OutboxConfig{"o": {Relay: nopRelay{}}}}
		o, err := New(cfg)
		_, _, merr := MigrationSQL(MigrateOptions{Dialect: dl, Table: table, Schema: schema})
		if (err == nil) != (merr == nil) {
			t.Fatalf("New and MigrationSQL disagree on table %q schema %q (%s): %v / %v", table, schema, dl, err, merr)
		}
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || (ce.Field != "Table" && ce.Field != "Schema") {
				t.Fatalf("New refused table %q schema %q with %T %v, want a *ConfigError naming Table or Schema", table, schema, err, err)
			}
			return
		}
		effective := table
		if effective == "" {
			effective = DefaultTable
		}
		for _, name := range []string{effective, schema} {
			if !utf8.ValidString(name) || strings.ContainsAny(name, "\"`'; \t\n\\.\x00-") {
				t.Fatalf("accepted the name %q", name)
			}
		}
		ref := dialect.New(o.kind, refSchema(schema), "t")
		got := statementsOf(o.tables[effective])
		want := statementsOf(ref)
		for i := range got {
			for _, id := range quotedIdent.FindAllString(got[i], -1) {
				if len(id)-2 > 63 {
					t.Errorf("identifier %s of %d bytes: PostgreSQL cuts it to 63, MySQL refuses it", id, len(id)-2)
				}
			}
			if a, b := quotedIdent.ReplaceAllString(got[i], "Q"), quotedIdent.ReplaceAllString(want[i], "Q"); a != b {
				t.Fatalf("table %q schema %q changes the SQL outside quoted names:\n%s\nwant\n%s", table, schema, a, b)
			}
		}
		// The DDL creates distinct objects: no name derived from the table repeats.
		seen := map[string]bool{}
		for _, st := range o.tables[effective].Up() {
			if !strings.HasPrefix(st, "CREATE") || strings.HasPrefix(st, "CREATE SCHEMA") {
				continue
			}
			id := quotedIdent.FindAllString(st, -1)
			name := strings.Join(id, ".")
			if strings.HasPrefix(st, "CREATE INDEX") {
				name = id[0]
			} else if schema != "" {
				name = id[0] + "." + id[1]
			} else {
				name = id[0]
			}
			if seen[name] {
				t.Errorf("two objects named %s", name)
			}
			seen[name] = true
		}
	})
}

func refSchema(schema string) string {
	if schema == "" {
		return ""
	}
	return "s"
}

// FuzzOutboxNames: an outbox name is a value, never SQL; New takes a name a database
// column can hold and refuses the rest with a *ConfigError.
func FuzzOutboxNames(f *testing.F) {
	for _, s := range []string{"orders", "o", "", "a b;'\"`", "表", "a\x00b", "a\xffb", strings.Repeat("x", 200), strings.Repeat("x", 201), strings.Repeat("é", 100), strings.Repeat("é", 101)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		_, err := New(Config{DB: new(sql.DB), Dialect: Postgres, Outboxes: map[string]OutboxConfig{name: {Relay: nopRelay{}}}})
		ok := name != "" && utf8.ValidString(name) && !strings.ContainsRune(name, 0) && len(name) <= 200
		switch {
		case ok && err != nil:
			t.Fatalf("New refused outbox %q: %v", name, err)
		case !ok && err == nil:
			t.Fatalf("New accepted outbox %q, which the outbox column cannot hold", name)
		case err != nil:
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != "Outboxes" {
				t.Fatalf("outbox %q: %v, want a *ConfigError on Outboxes", name, err)
			}
		}
	})
}

// FuzzBackoff: the delay is never negative, never below Min nor above Max (when they are
// ordered), and never panics, whatever the settings and the attempt count.
func FuzzBackoff(f *testing.F) {
	for _, s := range []struct {
		min, max int64
		attempts int
	}{
		{0, 0, 1}, {int64(time.Second), int64(time.Minute), 1}, {int64(time.Second), int64(time.Minute), 60},
		{1, 2, 1 << 30}, {int64(time.Second), int64(time.Minute), 0}, // attempt 0 was a negative shift: a panic
		{int64(time.Second), int64(time.Minute), -5}, {int64(time.Second), int64(time.Minute), math.MinInt},
		{math.MaxInt64, math.MaxInt64, math.MaxInt}, {math.MaxInt64 / 3, math.MaxInt64, 3},
		{-1, -1, 1}, {0, -3, 1}, // a negative Max drew from an empty range: a panic
		{int64(time.Minute), int64(time.Second), 2}, {0, int64(500 * time.Millisecond), 1},
		{1 << 61, math.MaxInt64, 2}, {3, math.MaxInt64, 62}, {3, math.MaxInt64, 63},
	} {
		f.Add(s.min, s.max, s.attempts)
	}
	f.Fuzz(func(t *testing.T, lo, hi int64, attempts int) {
		b := Backoff{Min: time.Duration(lo), Max: time.Duration(hi)}
		d := b.Delay(attempts)
		if d < 0 {
			t.Fatalf("Backoff{Min: %d, Max: %d}.Delay(%d) = %v, negative", lo, hi, attempts, d)
		}
		if lo > 0 && hi >= lo && (d < b.Min || d > b.Max) {
			t.Fatalf("Backoff{Min: %v, Max: %v}.Delay(%d) = %v, outside [Min, Max]", b.Min, b.Max, attempts, d)
		}
		// Through New: a valid Backoff gives delays within what New says is in force.
		o, err := New(Config{DB: new(sql.DB), Dialect: Postgres, Outboxes: map[string]OutboxConfig{"o": {Relay: nopRelay{}, Backoff: b}}})
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.HasSuffix(ce.Field, ".Backoff") {
				t.Fatalf("New with Backoff{Min: %v, Max: %v}: %v, want a *ConfigError on Backoff", b.Min, b.Max, err)
			}
			if lo >= 0 && (hi == 0 || hi >= lo) {
				t.Fatalf("New refused Backoff{Min: %v, Max: %v}: %v", b.Min, b.Max, err)
			}
			return
		}
		eff := o.Config().Outboxes["o"].Backoff
		if eff.Min <= 0 || eff.Max < eff.Min {
			t.Fatalf("Backoff{Min: %v, Max: %v} in force as Min %v Max %v", b.Min, b.Max, eff.Min, eff.Max)
		}
		if hi > 0 && eff.Max != b.Max {
			t.Fatalf("Backoff{Min: %v, Max: %v}: Max in force is %v", b.Min, b.Max, eff.Max)
		}
		if d := eff.Delay(attempts); d < eff.Min || d > eff.Max {
			t.Fatalf("Backoff in force {Min: %v, Max: %v}.Delay(%d) = %v, outside it", eff.Min, eff.Max, attempts, d)
		}
	})
}

// FuzzBackoffFunc: a user's delay function that returns anything still gives a delay
// that is not negative.
func FuzzBackoffFunc(f *testing.F) {
	f.Add(int64(-1), 1)
	f.Add(int64(math.MinInt64), 0)
	f.Add(int64(math.MaxInt64), math.MaxInt)
	f.Fuzz(func(t *testing.T, ret int64, attempts int) {
		b := Backoff{Func: func(int) time.Duration { return time.Duration(ret) }}
		if d := b.Delay(attempts); d < 0 || (ret >= 0 && d != time.Duration(ret)) {
			t.Fatalf("Func returning %d: Delay = %v", ret, d)
		}
	})
}

// hostileMsg is a message whose parts come from the fuzzer.
type hostileMsg struct {
	group, typ string
	headers    map[string]string
}

func (hostileMsg) Outbox() string                 { return "o" }
func (m hostileMsg) GroupKey() string             { return m.group }
func (m hostileMsg) MessageType() string          { return m.typ }
func (m hostileMsg) Headers() map[string]string   { return m.headers }
func (m hostileMsg) MarshalJSON() ([]byte, error) { return []byte(`{}`), nil }

// textOK reports whether s can be stored in a text column of every dialect unchanged.
func textOK(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// recordingExec records the statements Publish runs and answers none of them.
type recordingExec struct{ n int }

var errRecorded = errors.New("recorded, not run")

func (r *recordingExec) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	r.n++
	return nil, errRecorded
}

func (r *recordingExec) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	r.n++
	return nil, errRecorded
}

// FuzzPublishInput: Publish either refuses a group key, type or header with
// ErrInvalidMessage before any statement runs, or hands them to the database as they
// are. Text a column cannot hold unchanged is refused: a group key or type with NUL or
// invalid UTF-8 (PostgreSQL refuses both and aborts the caller's transaction), headers
// with invalid UTF-8 (JSON would replace the bytes); and group keys and types over 255
// bytes, and headers over MaxHeadersBytes of JSON. NUL in headers is fine: JSON escapes it.
func FuzzPublishInput(f *testing.F) {
	for _, s := range []string{"order:42", "", "a\x00b", "a\xffb", "é✓📦", strings.Repeat("k", 255), strings.Repeat("k", 256), "'; DROP TABLE y;--", strings.Repeat("v", MaxHeadersBytes)} {
		f.Add(s, "t.Event", "k", "v")
		f.Add("g", s, "k", "v")
		f.Add("g", "t.Event", s, "v")
		f.Add("g", "t.Event", "k", s)
	}
	o, err := New(Config{DB: new(sql.DB), Dialect: Postgres, Outboxes: map[string]OutboxConfig{"o": {Relay: nopRelay{}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, group, typ, hk, hv string) {
		exec := &recordingExec{}
		_, err := o.Publish(context.Background(), exec, hostileMsg{group: group, typ: typ, headers: map[string]string{hk: hv}})
		encoded, _ := json.Marshal(map[string]string{hk: hv})
		ok := textOK(group) && len(group) <= MaxGroupKeyLen && utf8.ValidString(hk) && utf8.ValidString(hv) &&
			len(encoded) <= MaxHeadersBytes && (typ == "" || (textOK(typ) && len(typ) <= MaxTypeLen))
		switch {
		case ok && !errors.Is(err, errRecorded):
			t.Fatalf("group %q type %q header %q=%q: %v, want it handed to the database", group, typ, hk, hv, err)
		case !ok && !errors.Is(err, ErrInvalidMessage):
			t.Fatalf("group %q type %q header %q=%q: %v, want ErrInvalidMessage", group, typ, hk, hv, err)
		case !ok && exec.n > 0:
			t.Fatalf("group %q type %q header %q=%q: %d statement(s) ran before the refusal", group, typ, hk, hv, exec.n)
		}
	})
}

// FuzzCodecOutput: whatever a codec returns (invalid JSON, binary, nothing, too much),
// Publish stores it as is or refuses it with ErrPayloadTooLarge, or ErrInvalidMessage
// when the codec fails, before any statement runs.
func FuzzCodecOutput(f *testing.F) {
	f.Add([]byte(`{"ok":true}`), false, 0)
	f.Add([]byte(`{not json`), false, 0)
	f.Add([]byte{0, 0xff, 0xfe}, false, 0)
	f.Add([]byte(nil), false, 0)
	f.Add([]byte("x"), true, 0)
	f.Add([]byte("x"), false, 1<<10+1)
	const limit = 1 << 10
	f.Fuzz(func(t *testing.T, out []byte, fail bool, pad int) {
		pad = max(0, min(pad, 1<<12))
		payload := append(bytes.Clone(out), bytes.Repeat([]byte("p"), pad)...)
		if len(out) == 0 && pad == 0 {
			payload = out // keep nil as nil
		}
		codec := CodecFunc(func(Message) ([]byte, error) {
			if fail {
				return payload, errors.New("cannot encode")
			}
			return payload, nil
		})
		o, err := New(Config{DB: new(sql.DB), Dialect: Postgres, Codec: codec, MaxPayloadBytes: limit,
			Outboxes: map[string]OutboxConfig{"o": {Relay: nopRelay{}}}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := o.prepare(hostileMsg{typ: "t"}, &publishOptions{}, new(Envelope))
		switch {
		case fail:
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("a failing codec: %v, want ErrInvalidMessage", err)
			}
		case len(payload) > limit:
			if !errors.Is(err, ErrPayloadTooLarge) {
				t.Fatalf("a %d-byte payload over %d: %v, want ErrPayloadTooLarge", len(payload), limit, err)
			}
		case err != nil:
			t.Fatalf("a %d-byte payload: %v", len(payload), err)
		case !bytes.Equal(r.env.Payload, payload) || r.env.Payload == nil:
			t.Fatalf("payload %q stored as %q", payload, r.env.Payload)
		}
	})
}
