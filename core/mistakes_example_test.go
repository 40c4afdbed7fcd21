package core_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/outboxer-go/outboxer/core"
)

// Headers named like the sinks' own are refused before anything is written: a sink would
// overwrite or drop them.
func ExampleReservedHeader() {
	ob, err := core.New(core.Config{
		DB: new(sql.DB), Dialect: core.Postgres, PublishOnly: true, // New does no I/O
		Outboxes: map[string]core.OutboxConfig{"orders": {}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(core.ReservedHeader("outboxer-id"), core.ReservedHeader("Outboxer_Type"), core.ReservedHeader("trace-id"))
	_, err = ob.Publish(context.Background(), new(sql.DB), core.Raw{To: "orders", Type: "order.created", Data: []byte(`{}`),
		Header: map[string]string{"outboxer-id": "42"}})
	fmt.Println(errors.Is(err, core.ErrInvalidMessage))
	// Output:
	// true true false
	// true
}

// A service that starts publishing before its migration ran gets ErrNotMigrated, which
// says to run it.
func ExampleErrNotMigrated() {
	ctx := context.Background()
	var db *sql.DB // opened with your driver
	var ob *core.Outboxer

	_, err := ob.Publish(ctx, db, OrderPlaced{OrderID: 42})
	if errors.Is(err, core.ErrNotMigrated) {
		// Run core.Migrate (or outboxer migrate up, or your migration tool with
		// core.MigrationSQL) before the first publish.
		log.Print(err)
	}
}
