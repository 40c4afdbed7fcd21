// Testing: how to test code that publishes, with Manual mode, Drain and coretest.
//
// shop.go is a small order service; shop_test.go is how its tests check what it
// publishes: the service's own Outboxer configuration in Manual mode, a coretest.Recorder
// as the relay, Drain to deliver synchronously, a refusal injected with coretest.FailIDs,
// ListPending and ListDead to see what is left, and RetryDead. This program plays the same
// scenario and prints it.
//
//	go test ./examples/testing
//	go run ./examples/testing
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-testing")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "shop.db")))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrate(ctx, db); err != nil {
		return err
	}

	rec := &coretest.Recorder{}
	cfg := outboxConfig(db, rec)
	cfg.Manual = true
	ob, err := core.New(cfg)
	if err != nil {
		return err
	}
	shop := &Shop{db: db, ob: ob}

	for id := 1; id <= 3; id++ {
		if err := shop.PlaceOrder(ctx, id, 10*float64(id)); err != nil {
			return err
		}
	}
	err = shop.PlaceOrder(ctx, 1, 99)
	fmt.Fprintf(out, "placed orders 1, 2, 3; placing order 1 again failed: %t\n", err != nil)
	if err := list(ctx, out, "pending", ob.ListPending); err != nil {
		return err
	}

	// #2 is order 2's event (a fresh table numbers from 1); Permanent: no retry, dead at once.
	rec.Fail = coretest.FailIDs(core.Permanent(errors.New("schema rejected")), 2)
	if err := drain(ctx, out, ob, "broker refuses #2"); err != nil {
		return err
	}
	if err := list(ctx, out, "dead", ob.ListDead); err != nil {
		return err
	}
	rec.Fail = nil
	n, err := ob.RetryDead(ctx, "orders", 2)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "retried %d dead\n", n)
	if err := list(ctx, out, "pending", ob.ListPending); err != nil {
		return err
	}
	if err := drain(ctx, out, ob, "broker fixed"); err != nil {
		return err
	}
	fmt.Fprintln(out, "the relay got, in order:")
	for _, e := range rec.Delivered() {
		fmt.Fprintf(out, "  #%d %s %s %s\n", e.ID, e.GroupKey, e.Type, e.Payload)
	}
	return nil
}

func list(ctx context.Context, out io.Writer, what string, ls func(context.Context, string, int) ([]core.Envelope, error)) error {
	envs, err := ls(ctx, "orders", 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s:\n", what)
	for _, e := range envs {
		fmt.Fprintf(out, "  #%d %s %s attempts %d last error %q\n", e.ID, e.GroupKey, e.Type, e.Attempts, e.LastError)
	}
	return nil
}

func drain(ctx context.Context, out io.Writer, ob *core.Outboxer, what string) error {
	res, err := ob.Drain(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "drain (%s): delivered %d, failed %d, dead %d\n", what, res.Delivered, res.Failed, res.Dead)
	return nil
}
