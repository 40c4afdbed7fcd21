package uitest

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// TestSeveralInstances: one dashboard over two tables; each page and action stays in
// the instance it names.
func TestSeveralInstances(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		second, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: "second_box", Manual: true, Codec: rawCodec,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: f.relay}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := second.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		env, err := second.Publish(ctx, db.DB, msg{"orders", "second.only", []byte(`{"second":true}`)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{
			{Name: "main", DB: db.DB, Dialect: db.Dialect, Table: table},
			{Name: "second", DB: db.DB, Dialect: db.Dialect, Table: "second_box"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		f.srv.Config.Handler = h
		f.base = f.srv.URL + "/"
		body := f.mustGet("")
		mustContain(t, "the overview", body, `id="outboxes-main"`, `id="outboxes-second"`, `href="outbox?i=second&amp;o=orders"`)
		got := listed(f.mustGet("messages?i=second&o=orders"))
		if len(got) != 1 || got[0] != env.ID {
			t.Fatalf("the second instance lists %v, want [%d]", got, env.ID)
		}
		if code, _ := f.get("messages?i=second&o=mail"); code != http.StatusNotFound {
			t.Fatalf("an outbox of the first instance asked of the second: %d, want 404", code)
		}
		f.act(url.Values{"i": {"second"}, "o": {"orders"}, "op": {"discard"}, "scope": {"ids"}, "id": {strconv.FormatInt(env.ID, 10)}},
			`Delete 1 message for good`, `instance second`)
		if c, _ := second.Counts(ctx, "orders"); c.Pending != 0 {
			t.Fatalf("the second instance still has %d pending", c.Pending)
		}
		if c := f.counts("orders"); c.Pending != 4 {
			t.Fatalf("an action on the second instance changed the first: %d pending, want 4", c.Pending)
		}
	})
}
