package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/outboxer-go/outboxer/core"
)

// OrderPlaced and OrderPaid are the service's events; the group key keeps one order's
// events in sequence.
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string      { return "orders" }
func (OrderPlaced) MessageType() string { return "shop.OrderPlaced" }
func (e OrderPlaced) GroupKey() string  { return fmt.Sprintf("order:%d", e.OrderID) }

type OrderPaid struct {
	OrderID int `json:"order_id"`
}

func (OrderPaid) Outbox() string      { return "orders" }
func (OrderPaid) MessageType() string { return "shop.OrderPaid" }
func (e OrderPaid) GroupKey() string  { return fmt.Sprintf("order:%d", e.OrderID) }

// Shop is the code under test: each write publishes its event in the same transaction.
type Shop struct {
	db *sql.DB
	ob *core.Outboxer
}

// PlaceOrder saves an order and publishes OrderPlaced; an existing ID fails and publishes
// nothing.
func (s *Shop) PlaceOrder(ctx context.Context, id int, total float64) error {
	return s.ob.InTx(ctx, s.db, func(tx *sql.Tx, p *core.TxPublisher) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, id, total); err != nil {
			return fmt.Errorf("placing order %d: %w", id, err)
		}
		_, err := p.Publish(ctx, OrderPlaced{OrderID: id, Total: total})
		return err
	})
}

// PayOrder marks an order paid and publishes OrderPaid.
func (s *Shop) PayOrder(ctx context.Context, id int) error {
	return s.ob.InTx(ctx, s.db, func(tx *sql.Tx, p *core.TxPublisher) error {
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET paid = 1 WHERE id = ?`, id); err != nil {
			return err
		}
		_, err := p.Publish(ctx, OrderPaid{OrderID: id})
		return err
	})
}

// migrate creates the service's table and the outbox table.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL NOT NULL, paid INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	return core.Migrate(ctx, db, core.MigrateOptions{})
}

// outboxConfig is the service's Outboxer configuration; its tests reuse it in Manual mode
// with a recording relay instead of the broker's.
func outboxConfig(db *sql.DB, relay core.Relay) core.Config {
	return core.Config{
		DB:       db,
		Logger:   slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, MaxAttempts: 5}},
	}
}

func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}
