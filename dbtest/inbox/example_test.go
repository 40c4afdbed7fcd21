package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// A consumer handles a message delivered twice: the second delivery finds the first's
// record and does not run the handler.
func Example() {
	dir, _ := os.MkdirTemp("", "inbox")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "billing.db")))
	defer db.Close()
	ctx := context.Background()

	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		panic(err)
	}
	if err := in.Migrate(ctx); err != nil {
		panic(err)
	}
	db.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT)`)

	// What the broker delivered, twice: the headers carry the key (core.HeaderKey).
	headers := map[string]string{core.HeaderKey: core.MessageKey("orders-db", "outboxer_messages", 42)}
	for range 2 {
		key, _ := core.KeyFromHeaders(headers)
		o, err := in.Handle(ctx, "billing", inbox.Message{Key: key}, func(ctx context.Context, tx *sql.Tx, _ inbox.Outcome) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ('42')`)
			return err
		})
		fmt.Println(o, err) // acknowledge to the broker now, in either case
	}
	var n int
	db.QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output:
	// claimed <nil>
	// duplicate <nil>
	// invoices: 1
}
