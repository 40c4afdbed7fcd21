package dbtest_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// With interpolateParams=true (what the README advises on MariaDB) the driver writes every
// argument into the statement text: the engine's own statements and the values a message
// carries must come through that escaping unchanged, a PublishAll larger than
// max_allowed_packet is written in statements that fit, and a message that cannot fit is
// refused before it is sent, so no pooled connection is closed by the server.
func TestMariaDBInterpolateParams(t *testing.T) {
	h := dbtest.MariaDB(t).Interpolating(t)
	db := &dbtest.DB{DB: h, Dialect: core.MySQL}
	ctx := context.Background()
	rec := &recorder{}
	ob := setup(t, db, core.Config{Manual: true, MaxPayloadBytes: 32 << 20,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}}})

	binary := make([]byte, 0, 300)
	for i := range 256 {
		binary = append(binary, byte(i))
	}
	binary = append(binary, []byte(`'"\\'); DROP TABLE outboxer_messages; --`)...)
	hdr := map[string]string{"quote": `it's "x" \n`, "unicode": "grüße ✓", "back\\slash": `\`}
	msgs := []core.Message{
		core.Raw{To: "orders", Type: "bin", Key: `o'brien\`, Data: binary, Header: hdr},
		core.Raw{To: "orders", Type: "text", Key: `o'brien\`, Data: []byte(`{"note":"it's \"fine\""}`)},
	}
	tx, err := h.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := ob.PublishAll(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	later, err := ob.Publish(ctx, tx, core.Raw{To: "orders", Type: "later", Key: "other", Data: []byte("x")}, core.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	stored, err := ob.ListPending(ctx, "orders", 0)
	if err != nil || len(stored) != 3 {
		t.Fatalf("pending %d, %v; want 3", len(stored), err)
	}
	for i, e := range envs {
		s := stored[i]
		if s.ID != e.ID || s.GroupKey != `o'brien\` || !bytes.Equal(s.Payload, e.Payload) || !maps.Equal(s.Headers, e.Headers) {
			t.Errorf("stored %d = %+v\nwant %+v", i, s, e)
		}
	}
	if !bytes.Equal(stored[0].Payload, binary) || !maps.Equal(stored[0].Headers, hdr) {
		t.Errorf("the binary payload or the headers changed on the way: %q %v", stored[0].Payload, stored[0].Headers)
	}

	// The engine's statements (fetch, confirm, leases) through the same handle.
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	got := rec.delivered()
	if len(got) != 2 || got[0].ID != envs[0].ID || got[1].ID != envs[1].ID || !bytes.Equal(got[0].Payload, binary) {
		t.Fatalf("delivered %d messages, want the two due ones in order with their bytes", len(got))
	}
	if n, err := ob.Discard(ctx, "orders", later.ID); err != nil || n != 1 {
		t.Fatalf("Discard of the delayed message: %d, %v", n, err)
	}

	// A PublishAll over max_allowed_packet goes in several statements, all or none: every
	// message is stored, and no connection of the pool is closed by the server.
	var packet int
	if err := h.QueryRowContext(ctx, `SELECT @@max_allowed_packet`).Scan(&packet); err != nil {
		t.Fatal(err)
	}
	big := make([]core.Message, packet/(1<<20)+2)
	for i := range big {
		big[i] = core.Raw{To: "orders", Type: "big", Key: "g", Data: bytes.Repeat([]byte{'x'}, 1<<20)}
	}
	if _, err := ob.PublishAll(ctx, h, big); err != nil {
		t.Fatalf("a PublishAll of %d MiB, over max_allowed_packet (%d): %v", len(big), packet, err)
	}
	if c := counts(t, ob, "orders"); c.Pending != int64(len(big)) {
		t.Fatalf("counts %+v after the PublishAll, want %d pending", c, len(big))
	}
	// One message whose statement cannot fit: refused before it is sent.
	huge := core.Raw{To: "orders", Type: "huge", Key: "g", Data: bytes.Repeat([]byte{'\''}, packet/2+1)}
	if _, err := ob.Publish(ctx, h, huge); !errors.Is(err, core.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "max_allowed_packet") {
		t.Fatalf("a message over max_allowed_packet once escaped: %v, want ErrPayloadTooLarge naming max_allowed_packet", err)
	}
	// Every connection the pool holds still works.
	conns := make([]*sql.Conn, 0, 4)
	for range 4 {
		c, err := h.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if err := c.PingContext(ctx); err != nil {
			t.Errorf("pooled connection %d after the publishes: %v", i, err)
		}
		c.Close()
	}
	if c := counts(t, ob, "orders"); c.Pending != int64(len(big)) {
		t.Fatalf("counts %+v after the refused Publish, want %d pending", c, len(big))
	}
}
