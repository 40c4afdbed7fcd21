package kafka_test

// Attacks on the franz-go consumer helper with hostile and malformed records.

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// fetch polls cl until it has n records.
func fetch(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for len(recs) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		recs = append(recs, fs.Records()...)
	}
	if len(recs) != n {
		t.Fatalf("fetched %d records, want %d", len(recs), n)
	}
	return recs
}

// TestAttackForwardedHeaders: envelopes whose headers carry the names of the sink's
// own headers (forwarded whole from the record their publisher handled) still carry
// their own key and ID: two messages forwarded from one are two effects.
func TestAttackForwardedHeaders(t *testing.T) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	kc, relay := kafkaRelay(t)
	fwd := map[string]string{kafka.HeaderKey: core.MessageKey("upstream", core.DefaultTable, 1), kafka.HeaderID: "999", kafka.HeaderOutbox: "spoofed"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := relay.Deliver(ctx, []core.Envelope{
		{ID: 7, Outbox: "orders", GroupKey: "c", Payload: []byte(`{}`), Headers: fwd},
		{ID: 8, Outbox: "orders", GroupKey: "c", Payload: []byte(`{}`), Headers: fwd},
	}); err != nil {
		t.Fatal(err)
	}
	cl := groupClient(t, kc.ListenAddrs())
	defer cl.Close()
	ran := map[int64]int{}
	c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing",
		Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error {
			ran[recordID(rec)]++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range fetch(t, ctx, cl, 2) {
		m, err := kafka.MessageOf(rec)
		if err != nil {
			t.Fatal(err)
		}
		id := recordID(rec)
		if want := core.MessageKey("", core.DefaultTable, id); m.Key != want || m.Seq != id || m.Group != inbox.GroupOf("orders", "c") {
			t.Errorf("record %d: %+v, want key %q, seq %d, group orders/c", id, m, want, id)
		}
		if o, err := c.HandleRecord(ctx, rec); err != nil || o != inbox.Claimed {
			t.Errorf("record %d: %v %v, want claimed", id, o, err)
		}
	}
	if ran[7] != 1 || ran[8] != 1 {
		t.Errorf("handler runs %v, want one for each of 7 and 8", ran)
	}
}

// TestAttackMalformedRecords: records another producer wrote. Without the key header
// (or with an empty one) a record is refused with ErrNoKey (the OnForeign policy
// inbox.StopOnForeign); with a key the inbox
// refuses, ErrInvalidMessage; neither runs the handler. Of repeated headers the last
// counts, as Kafka's Headers.lastHeader reads them; a garbage ID leaves the record
// out of the stale check.
func TestAttackMalformedRecords(t *testing.T) {
	db := dbtest.SQLite(t)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect, StaleCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	hdr := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	cases := []struct {
		name    string
		key     string // the record's Kafka key: its group key
		headers []kgo.RecordHeader
		want    error         // HandleRecord's error
		msg     inbox.Message // MessageOf's, when want is nil
	}{
		{name: "no headers", want: inbox.ErrNoKey},
		{name: "empty key", headers: hdr(kafka.HeaderKey, ""), want: inbox.ErrNoKey},
		{name: "key in another case", headers: hdr("Outboxer-Key", "k0"), want: inbox.ErrNoKey},
		{name: "long key", headers: hdr(kafka.HeaderKey, strings.Repeat("k", 300)), want: inbox.ErrInvalidMessage},
		{name: "NUL key", headers: hdr(kafka.HeaderKey, "k\x00"), want: inbox.ErrInvalidMessage},
		{name: "binary key", headers: hdr(kafka.HeaderKey, "\xff\xfe"), want: inbox.ErrInvalidMessage},
		{name: "repeated key", headers: hdr(kafka.HeaderKey, "k1", kafka.HeaderKey, "k2"), msg: inbox.Message{Key: "k2"}},
		{name: "repeated key, empty last", headers: hdr(kafka.HeaderKey, "k3", kafka.HeaderKey, ""), want: inbox.ErrNoKey},
		{name: "garbage id", key: "g", headers: hdr(kafka.HeaderKey, "k4", kafka.HeaderID, "4x", kafka.HeaderOutbox, "orders"), msg: inbox.Message{Key: "k4"}},
		{name: "negative id", key: "g", headers: hdr(kafka.HeaderKey, "k5", kafka.HeaderID, "-5", kafka.HeaderOutbox, "orders"), msg: inbox.Message{Key: "k5", Seq: -5}}, // no group: not checked
		{name: "id, no record key", headers: hdr(kafka.HeaderKey, "k6", kafka.HeaderID, "6", kafka.HeaderOutbox, "orders"), msg: inbox.Message{Key: "k6", Seq: 6}},
		{name: "repeated id", key: "g", headers: hdr(kafka.HeaderKey, "k7", kafka.HeaderID, "70", kafka.HeaderID, "7", kafka.HeaderOutbox, "orders"), msg: inbox.Message{Key: "k7", Group: "orders/g", Seq: 7}},
	}
	kc, _ := kafkaRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for _, tc := range cases {
		rec := &kgo.Record{Value: []byte(tc.name), Headers: tc.headers}
		if tc.key != "" {
			rec.Key = []byte(tc.key)
		}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl := groupClient(t, kc.ListenAddrs())
	defer cl.Close()
	ran := map[string]int{}
	c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", OnForeign: inbox.StopOnForeign,
		Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error {
			ran[string(rec.Value)]++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	recs := fetch(t, ctx, cl, len(cases))
	for i, tc := range cases {
		rec := recs[i]
		if string(rec.Value) != tc.name {
			t.Fatalf("record %d is %q, want %q", i, rec.Value, tc.name)
		}
		_, err := c.HandleRecord(ctx, rec)
		if tc.want != nil {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
			if ran[tc.name] != 0 {
				t.Errorf("%s: the handler ran", tc.name)
			}
			continue
		}
		if err != nil || ran[tc.name] != 1 {
			t.Errorf("%s: %v (handler ran %d times), want it run once", tc.name, err, ran[tc.name])
		}
		if m, err := kafka.MessageOf(rec); err != nil || m != tc.msg {
			t.Errorf("%s: MessageOf = %+v, %v; want %+v", tc.name, m, err, tc.msg)
		}
	}
}

// TestAttackPoisonRecordStopsRun: a record without a key in the middle of a partition,
// with the OnForeign policy inbox.StopOnForeign (the default skips it, see
// consumer_foreign_test.go). Run handles and commits the records before it, then
// returns ErrNoKey without
// committing the bad record's offset, so the group's next consumer receives it again
// and stops at it again: the records behind it wait until an operator removes it (or
// a handler of theirs skips it). What it must never do is commit past it unhandled or
// run the records after it out of order.
func TestAttackPoisonRecordStopsRun(t *testing.T) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	kc, relay := kafkaRelay(t)
	deliver(t, relay, 1, 2)
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("poison")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deliver(t, relay, 3)
	for round := range 2 {
		cl := groupClient(t, kc.ListenAddrs())
		var seen []int64
		c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", OnForeign: inbox.StopOnForeign,
			Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error {
				seen = append(seen, recordID(rec))
				_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (?)`, recordID(rec))
				return err
			}})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Run(ctx)
		if !errors.Is(err, inbox.ErrNoKey) {
			t.Fatalf("round %d: Run = %v, want ErrNoKey", round, err)
		}
		want := []int64{1, 2}
		if round == 1 {
			want = nil // 1 and 2 were committed: the restarted consumer starts at the poison
		}
		if len(seen) != len(want) || (len(want) > 0 && (seen[0] != 1 || seen[1] != 2)) {
			t.Errorf("round %d: handled %v, want %v", round, seen, want)
		}
		cl.Close()
	}
	if e := dbtest.Effects(t, db.DB); len(e) != 2 || e[1] != 1 || e[2] != 1 {
		t.Errorf("effects %v, want one each of 1 and 2 and none of 3", e)
	}
}
