package core

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type nopRelay struct{}

func (nopRelay) Deliver(context.Context, []Envelope) error { return nil }

func TestValidateNamesTheOption(t *testing.T) {
	base := func() Config {
		return Config{DB: new(sql.DB), Dialect: Postgres, Outboxes: map[string]OutboxConfig{"orders": {Relay: nopRelay{}}}}
	}
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"DB", func(c *Config) { c.DB = nil }},
		{"Dialect", func(c *Config) { c.Dialect = "oracle" }},
		{"Table", func(c *Config) { c.Table = `x"; DROP TABLE y;--` }},
		{"Schema", func(c *Config) { c.Schema = "1bad" }},
		{"Schema", func(c *Config) { c.Dialect, c.Schema = SQLite, "s" }},
		{"Notify", func(c *Config) { c.Dialect, c.Notify = MySQL, true }},
		{"NotifyListener", func(c *Config) { c.NotifyListener = sqlListener{} }},
		{"Manual", func(c *Config) { c.Manual, c.PublishOnly = true, true }},
		{"LeaseDuration", func(c *Config) { c.LeaseDuration = time.Millisecond }},
		{"Outboxes", func(c *Config) { c.Outboxes = nil }},
		{`Outboxes["orders"].Relay`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{} }},
		{`Outboxes["orders"].Partitions`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, Partitions: -1} }},
		{`Outboxes["orders"].Partitions`, func(c *Config) {
			c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, Ordering: OrderTotal, Partitions: 2}
		}},
		{`Outboxes["orders"].Ordering`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, Ordering: 9} }},
		{`Outboxes["orders"].BatchSize`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, BatchSize: MaxBatchSize + 1} }},
		{`Outboxes["orders"].PollInterval`, func(c *Config) {
			c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, PollInterval: time.Microsecond}
		}},
		{`Outboxes["orders"].MaxAttempts`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, MaxAttempts: -1} }},
		{`Outboxes["orders"].Backoff`, func(c *Config) {
			c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, Backoff: Backoff{Min: time.Minute, Max: time.Second}}
		}},
		{`Outboxes["orders"].Retention`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, Retention: KeepFor(-1)} }},
		{`Outboxes["orders"].DeliveryTimeout`, func(c *Config) {
			c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, DeliveryTimeout: time.Minute}
		}},
		{`Outboxes["orders"].Table`, func(c *Config) { c.Outboxes["orders"] = OutboxConfig{Relay: nopRelay{}, Table: "a b"} }},
	}
	for _, tc := range cases {
		cfg := base()
		tc.edit(&cfg)
		c := cfg.withDefaults()
		err := c.validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	cfg := base()
	cfg.PublishOnly = true
	cfg.Outboxes["orders"] = OutboxConfig{} // no relay needed
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		t.Errorf("publish-only without a relay: %v", err)
	}
}

func TestDefaultsAreTheReferences(t *testing.T) {
	c := (&Config{Outboxes: map[string]OutboxConfig{"o": {}}}).withDefaults()
	ob := c.Outboxes["o"]
	if c.Name != "outboxer" || c.Table != "outboxer_messages" || c.PruneInterval != time.Minute || c.Notify || c.PublishOnly || c.Manual || c.RequireTransaction {
		t.Errorf("instance defaults: %+v", c)
	}
	if ob.Ordering != OrderGroup || ob.Partitions != 1 || ob.BatchSize != 100 || ob.PollInterval != time.Second ||
		ob.MaxAttempts != 0 || ob.Backoff.Min != time.Second || ob.Backoff.Max != time.Minute || ob.Retention.Keep() != 0 || ob.SerializeWrites {
		t.Errorf("outbox defaults: %+v", ob)
	}
	if ob.DeliveryTimeout != 10*time.Second || c.LeaseDuration != 20*time.Second {
		t.Errorf("timeouts: %v %v", ob.DeliveryTimeout, c.LeaseDuration)
	}
}

func TestBackoffStaysWithinBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 1; attempt <= 80; attempt++ {
		for range 50 {
			d := b.Delay(attempt)
			if d < b.Min || d > b.Max {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, b.Min, b.Max)
			}
		}
	}
	// It grows: the ceiling of attempt 3 is 400ms, of attempt 10 the maximum.
	if d := b.Delay(3); d > 400*time.Millisecond {
		t.Errorf("attempt 3: %v", d)
	}
	high := 0
	for range 100 {
		if b.Delay(10) >= time.Second {
			high++
		}
	}
	if high != 100 {
		t.Errorf("attempt 10 below Max/2 %d times in 100", 100-high)
	}
	f := Backoff{Func: func(n int) time.Duration { return time.Duration(n) * time.Second }}
	if f.Delay(3) != 3*time.Second {
		t.Errorf("Func backoff: %v", f.Delay(3))
	}
}

func TestPartitionForIsStable(t *testing.T) {
	// These values are a contract: rows written by one version are read by another.
	for key, want := range map[string]int{"order:1": 2, "order:2": 7, "customer:9": 0, "": 5} {
		if got := PartitionFor(key, 8); got != want {
			t.Errorf("PartitionFor(%q, 8) = %d, want %d", key, got, want)
		}
	}
}

func TestPartialFailureAndPermanent(t *testing.T) {
	root := errors.New("rejected")
	pf := &PartialFailure{Failed: map[int64]error{7: root, 3: Permanent(root)}}
	if !errors.Is(pf, root) || !errors.Is(pf, ErrPermanent) {
		t.Errorf("PartialFailure does not unwrap to its errors")
	}
	if got := pf.Error(); got != "outboxer: 2 message(s) not delivered: 3 (rejected) 7 (rejected)" {
		t.Errorf("Error() = %q", got)
	}
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	p := Permanent(root)
	if Permanent(p) != p || p.Error() != "rejected" {
		t.Error("Permanent wraps twice or changes the message")
	}
}

func TestMigrationSQL(t *testing.T) {
	for _, d := range []Dialect{Postgres, SQLite, MySQL} {
		up, down, err := MigrationSQL(MigrateOptions{Dialect: d, Table: "order_outbox"})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CREATE TABLE IF NOT EXISTS", "order_outbox", "order_outbox_leases", "order_outbox_pending"} {
			if !strings.Contains(up, want) {
				t.Errorf("%s up lacks %q", d, want)
			}
		}
		if !strings.Contains(down, "DROP TABLE IF EXISTS") {
			t.Errorf("%s down: %s", d, down)
		}
	}
	up, _, _ := MigrationSQL(MigrateOptions{Dialect: Postgres, Schema: "billing"})
	if !strings.Contains(up, `CREATE SCHEMA IF NOT EXISTS "billing"`) || !strings.Contains(up, `"billing"."outboxer_messages"`) {
		t.Errorf("schema not used:\n%s", up)
	}
	if _, _, err := MigrationSQL(MigrateOptions{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("no dialect: %v", err)
	}
}

type named struct{}

func (named) Outbox() string { return "o" }

type typed struct{ named }

func (typed) MessageType() string { return "shop.OrderPlaced" }

func TestMessageType(t *testing.T) {
	if got := messageType(named{}); got != "core.named" {
		t.Errorf("default type = %q", got)
	}
	if got := messageType(&named{}); got != "core.named" {
		t.Errorf("pointer type = %q", got)
	}
	if got := messageType(typed{}); got != "shop.OrderPlaced" {
		t.Errorf("Typer = %q", got)
	}
}

func TestSharesDealPartitionsFairly(t *testing.T) {
	names := func(n int) []node {
		var out []node
		for i := range n {
			out = append(out, node{name: fmt.Sprintf("n%02d", n-i)}) // unsorted on purpose
		}
		return out
	}
	for _, c := range []struct {
		parts, nodes int
		want         []int // by sorted name
	}{
		{12, 3, []int{4, 4, 4}},
		{12, 4, []int{3, 3, 3, 3}},
		{12, 5, []int{3, 3, 2, 2, 2}},
		{4, 8, []int{1, 1, 1, 1, 0, 0, 0, 0}},
		{8, 1, []int{8}},
		{1, 3, []int{1, 0, 0}},
	} {
		got := shares(c.parts, names(c.nodes))
		for i, w := range c.want {
			if n := fmt.Sprintf("n%02d", i+1); got[n] != w {
				t.Errorf("%d partitions over %d nodes: %s gets %d, want %d (all: %v)", c.parts, c.nodes, n, got[n], w, got)
			}
		}
	}
	// Caps: a capped node gets at most its cap, the others share the rest; a node that
	// opted out has no limit and is not dealt anything.
	got := shares(12, []node{{name: "a", max: 1}, {name: "b"}, {name: "c", max: AllPartitions}, {name: "d"}})
	if got["a"] != 1 || got["b"] != 6 || got["d"] != 5 || got["c"] != -1 {
		t.Errorf("capped share-out = %v, want a 1, b 6, c -1, d 5", got)
	}
	// Caps too small for every partition: the shares stop at the caps.
	got = shares(10, []node{{name: "a", max: 2}, {name: "b", max: 3}})
	if got["a"] != 2 || got["b"] != 3 {
		t.Errorf("share-out under small caps = %v, want a 2, b 3", got)
	}
	if got := shares(5, nil); len(got) != 0 {
		t.Errorf("share-out over no node = %v", got)
	}
}

// Partitions are dealt in join order, then by name: the nodes already there keep their
// shares when one joins, whatever its name.
func TestSharesDealInJoinOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(name string, micros int) node {
		return node{name: name, joined: t0.Add(time.Duration(micros) * time.Microsecond)}
	}
	// Four nodes hold the four partitions; "a" joins last: it stands by, no share moves.
	holders := []node{at("e", 3), at("c", 1), at("b", 0), at("d", 2)}
	before := shares(4, holders)
	after := shares(4, append(holders, at("a", 4)))
	for _, n := range holders {
		if before[n.name] != 1 || after[n.name] != 1 {
			t.Errorf("node %s: share %d before a joined, %d after; want 1 and 1", n.name, before[n.name], after[n.name])
		}
	}
	if after["a"] != 0 {
		t.Errorf("the node that joined last has share %d, want 0 (all: %v)", after["a"], after)
	}
	// Uneven shares: the earlier nodes get the larger ones, whatever their names.
	got := shares(5, []node{at("a", 20), at("z", 10)})
	if got["z"] != 3 || got["a"] != 2 {
		t.Errorf("5 partitions over z (joined first) and a = %v, want z 3, a 2", got)
	}
	// Same join time: by name.
	got = shares(3, []node{at("y", 7), at("x", 7)})
	if got["x"] != 2 || got["y"] != 1 {
		t.Errorf("3 partitions over x and y joined together = %v, want x 2, y 1", got)
	}
	// A cap in join order: the first node stops at its cap, the next ones share the rest.
	capped := at("m", 0)
	capped.max = 1
	got = shares(6, []node{at("b", 2), capped, at("a", 1)})
	if got["m"] != 1 || got["a"] != 3 || got["b"] != 2 {
		t.Errorf("6 partitions over m (cap 1), a, b in join order = %v, want m 1, a 3, b 2", got)
	}
}

// A balanced node whose membership reads succeed takes a free partition only when the
// membership loop offers it; on its own timer it takes one only when the membership cannot
// be read (a share kept from before, or none: -1).
func TestClaimNeedsAnOfferWhileTheMembershipIsRead(t *testing.T) {
	b := newBalance()
	b.setShare(2)
	b.setFresh(true)
	if b.claim(false) {
		t.Fatal("a fresh node below its share took a partition nobody offered")
	}
	if !b.claim(true) || !b.claim(true) {
		t.Fatal("a fresh node below its share refused two offered partitions")
	}
	if b.claim(true) {
		t.Fatal("a node taking its share took an offered partition")
	}
	b.took(true)
	b.took(false) // the other take failed: a place again
	if b.surplus() {
		t.Fatal("a failed take made the node give a held partition back")
	}
	if !b.claim(true) {
		t.Fatal("a node whose take failed did not take another offered partition")
	}
	b.took(true)
	if b.claim(true) {
		t.Fatal("a node at its share took an offered partition")
	}
	b.setShare(1)
	if !b.surplus() || b.surplus() {
		t.Fatal("a node holding 2 with a share of 1 did not give exactly one back")
	}
	b.setShare(2)
	b.unclaim()
	b.setFresh(false) // the last read failed: the kept share still counts
	if !b.claim(false) {
		t.Fatal("a node whose membership read failed, below its kept share, did not take a partition")
	}
	u := newBalance()
	u.setShare(-1)
	u.setFresh(true)
	if !u.claim(false) || !u.claim(false) {
		t.Fatal("a node outside the share-out (-1) did not take what it could")
	}
}

func TestMaxPartitionsValidated(t *testing.T) {
	cfg := Config{DB: new(sql.DB), Dialect: Postgres, Outboxes: map[string]OutboxConfig{"orders": {Relay: nopRelay{}}}}
	for _, n := range []int{0, 1, 64, AllPartitions} {
		cfg.MaxPartitions = n
		if _, err := New(cfg); err != nil {
			t.Errorf("MaxPartitions %d: %v", n, err)
		}
	}
	cfg.MaxPartitions = -2
	_, err := New(cfg)
	var ce *ConfigError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "MaxPartitions" {
		t.Errorf("MaxPartitions -2: %v, want a ConfigError on MaxPartitions", err)
	}
}
