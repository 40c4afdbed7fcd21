package dbtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/outboxer-go/outboxer/inbox"
)

// ConsumerInbox makes db a consumer's database: an inbox (default table, migrated) and
// a table effects (id BIGINT), where a test's handler writes one row per run that
// commits. Effects counts them.
func ConsumerInbox(t testing.TB, db *DB) *inbox.Inbox {
	t.Helper()
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (id BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return in
}

// Effects returns how many times each ID's effect committed, from the effects table
// ConsumerInbox made.
func Effects(t testing.TB, db *sql.DB) map[int64]int {
	t.Helper()
	rows, err := db.Query(`SELECT id FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
