package core_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// OrderPlaced is a message: it names its outbox, and its group key keeps the events of one
// order in sequence.
type OrderPlaced struct {
	OrderID int `json:"order_id"`
}

func (OrderPlaced) Outbox() string             { return "orders" }
func (m OrderPlaced) GroupKey() string         { return fmt.Sprintf("order:%d", m.OrderID) }
func (OrderPlaced) MessageType() string        { return "shop.OrderPlaced" }
func (OrderPlaced) Headers() map[string]string { return map[string]string{"source": "checkout"} }

// New refuses a configuration it cannot run, naming the option.
func ExampleNew_invalidConfig() {
	_, err := core.New(core.Config{
		DB:      new(sql.DB), // any *sql.DB; New does no I/O
		Dialect: core.Postgres,
		Outboxes: map[string]core.OutboxConfig{
			"audit": {Relay: core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }), Ordering: core.OrderTotal, Partitions: 4},
		},
	})
	var ce *core.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	fmt.Println(err)
	// Output:
	// true Outboxes["audit"].Partitions
	// outboxer: invalid configuration: Outboxes["audit"].Partitions: must be 1 with OrderTotal, got 4
}

// Publish inside the transaction of the business write: the message is stored if and only
// if the transaction commits.
func ExampleOutboxer_Publish() {
	ctx := context.Background()
	var db *sql.DB // opened with your driver
	var ob *core.Outboxer

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ($1)`, 42); err != nil {
		return
	}
	env, err := ob.Publish(ctx, tx, OrderPlaced{OrderID: 42}, core.WithHeaders(map[string]string{"trace": "abc"}))
	if err != nil {
		return
	}
	if err := tx.Commit(); err != nil {
		return
	}
	ob.Wake(env) // optional: deliver now rather than at the next poll
}

// InTx commits business writes and messages together, rolls both back on an error or a
// panic, and wakes the relay at commit.
func ExampleOutboxer_InTx() {
	ctx := context.Background()
	var db *sql.DB
	var ob *core.Outboxer
	_ = ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET paid = true WHERE id = $1`, 42); err != nil {
			return err
		}
		_, err := p.Publish(ctx, OrderPlaced{OrderID: 42})
		return err
	})
}

// A relay that cannot deliver some messages of a batch names them; the others count as
// delivered. A permanent error makes its message dead at once instead of retrying it.
func ExamplePartialFailure() {
	relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		failed := map[int64]error{}
		for _, e := range batch {
			if len(e.Payload) > 10 {
				failed[e.ID] = core.Permanent(errors.New("too large for the broker"))
			}
		}
		if len(failed) > 0 {
			return &core.PartialFailure{Failed: failed}
		}
		return nil
	})
	err := relay.Deliver(context.Background(), []core.Envelope{
		{ID: 1, Payload: []byte(`{}`)},
		{ID: 2, Payload: []byte(strings.Repeat("x", 20))},
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, core.ErrPermanent))
	// Output:
	// outboxer: 1 message(s) not delivered: 2 (too large for the broker)
	// true
}

// The partition of a group key never changes between versions.
func ExamplePartitionFor() {
	fmt.Println(core.PartitionFor("order:1", 8), core.PartitionFor("order:2", 8))
	// Output: 2 7
}

// The DDL, for goose, golang-migrate or Atlas.
func ExampleMigrationSQL() {
	up, down, err := core.MigrationSQL(core.MigrateOptions{Dialect: core.Postgres, Table: "order_outbox"})
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.SplitN(up, "\n", 2)[0])
	fmt.Print(down)
	// Output:
	// CREATE TABLE IF NOT EXISTS "order_outbox" (
	// DROP TABLE IF EXISTS "order_outbox_nodes";
	//
	// DROP TABLE IF EXISTS "order_outbox_leases";
	//
	// DROP TABLE IF EXISTS "order_outbox";
}

// Exponential backoff with jitter between Min and Max, or a function of your own.
func ExampleBackoff() {
	b := core.Backoff{Min: time.Second, Max: time.Minute}
	d := b.Delay(3) // between 2 s and 4 s
	fmt.Println(d >= 2*time.Second && d <= 4*time.Second)
	fixed := core.Backoff{Func: func(attempts int) time.Duration { return time.Duration(attempts) * time.Second }}
	fmt.Println(fixed.Delay(5))
	// Output:
	// true
	// 5s
}
