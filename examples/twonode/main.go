// Two nodes: a web node that only publishes, and a relay node that delivers.
//
// The web node serves POST /orders: it inserts the order and publishes OrderPlaced in one
// transaction, and starts no relay (PublishOnly). The relay node has the same outboxes and
// a relay, and runs Run. They share nothing but the database.
//
// Here both run in one program on an embedded SQLite file, each with its own *sql.DB as
// two processes would have; in production they are separate processes (many web nodes,
// one or more relay nodes) on PostgreSQL or MariaDB. With PostgreSQL and Config.Notify, a
// commit on a web node wakes the relay node at once; without it the relay node polls every
// PollInterval, which is why this example sets a short one.
//
//	go run ./examples/twonode
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
)

// OrderPlaced is the event; its group key keeps one order's events in sequence.
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string     { return "orders" }
func (e OrderPlaced) GroupKey() string { return fmt.Sprintf("order:%d", e.OrderID) }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func open(path string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
}

var errOrderExists = errors.New("order exists")

// webNode is the publish-only instance behind the HTTP API.
func webNode(path string) (http.Handler, func() error, error) {
	db, err := open(path)
	if err != nil {
		return nil, nil, err
	}
	ob, err := core.New(core.Config{
		DB:          db,
		PublishOnly: true, // no relay, no workers: this node only writes
		Logger:      slog.New(slog.DiscardHandler),
		Outboxes:    map[string]core.OutboxConfig{"orders": {}},
	})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var o OrderPlaced
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.Total <= 0 {
			http.Error(w, "invalid order", http.StatusBadRequest)
			return
		}
		var env core.Envelope
		err := ob.InTx(r.Context(), db, func(tx *sql.Tx, p *core.TxPublisher) error {
			var n int
			if err := tx.QueryRowContext(r.Context(), `SELECT COUNT(*) FROM orders WHERE id = ?`, o.OrderID).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return errOrderExists
			}
			if _, err := tx.ExecContext(r.Context(), `INSERT INTO orders (id, total) VALUES (?, ?)`, o.OrderID, o.Total); err != nil {
				return err
			}
			var err error
			env, err = p.Publish(r.Context(), o)
			return err
		})
		switch { // on an error nothing was written: no order, no event
		case errors.Is(err, errOrderExists):
			http.Error(w, err.Error(), http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d accepted, event #%d", o.OrderID, env.ID)
	})
	return mux, db.Close, nil
}

// relayNode is the instance that delivers; here its relay hands each event to delivered.
func relayNode(path string, delivered chan<- core.Envelope) (*core.Outboxer, func() error, error) {
	db, err := open(path)
	if err != nil {
		return nil, nil, err
	}
	relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		for _, e := range batch {
			select {
			case delivered <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	ob, err := core.New(core.Config{
		DB:       db,
		Logger:   slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, PollInterval: 50 * time.Millisecond}},
	})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return ob, db.Close, nil
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-twonode")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shop.db")

	// Schema first (a migration step in production).
	setup, err := open(path)
	if err != nil {
		return err
	}
	if _, err := setup.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL NOT NULL)`); err != nil {
		setup.Close()
		return err
	}
	err = core.Migrate(ctx, setup, core.MigrateOptions{})
	setup.Close()
	if err != nil {
		return err
	}

	api, closeWeb, err := webNode(path)
	if err != nil {
		return err
	}
	defer closeWeb()
	srv := httptest.NewServer(api)
	defer srv.Close()

	delivered := make(chan core.Envelope, 16)
	relay, closeRelay, err := relayNode(path, delivered)
	if err != nil {
		return err
	}
	defer closeRelay()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	err = placeOrders(ctx, out, srv.URL, delivered)
	stop() // a graceful stop: Run confirms the batch in hand before it returns
	if runErr := <-done; err == nil {
		err = runErr
	}
	if err != nil {
		return err
	}
	close(delivered) // Run has returned: nothing sends any more
	for e := range delivered {
		fmt.Fprintf(out, "relay node: unexpected delivery #%d %s\n", e.ID, e.Payload)
	}
	c, err := relay.Counts(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "outbox: %d pending, %d dead\n", c.Pending, c.Dead)
	return nil
}

// placeOrders sends the web node four requests and, after each accepted one, waits for
// the relay node to deliver its event.
func placeOrders(ctx context.Context, out io.Writer, url string, delivered <-chan core.Envelope) error {
	for _, body := range []string{`{"order_id":1,"total":25.5}`, `{"order_id":1,"total":25.5}`, `{"order_id":2,"total":-3}`, `{"order_id":2,"total":99}`} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(out, "web node:   POST /orders %s -> %d %s\n", body, resp.StatusCode, strings.TrimSpace(string(text)))
		if resp.StatusCode != http.StatusCreated {
			continue
		}
		select { // the relay node picks the event up at its next poll
		case e := <-delivered:
			fmt.Fprintf(out, "relay node: delivered #%d %s %s\n", e.ID, e.GroupKey, e.Payload)
		case <-ctx.Done():
			return errors.New("the relay node delivered nothing in time")
		}
	}
	return nil
}
