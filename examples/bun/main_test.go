package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

func TestExample(t *testing.T) { check(t, openSQLite) }

// TestExamplePostgres runs the example on PostgreSQL through bun's pgdriver.
func TestExamplePostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(postgresURL())))
	err := admin.PingContext(ctx)
	admin.Close()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL is unavailable in CI: %v", err)
		}
		t.Skipf("PostgreSQL is unavailable: %v", err)
	}
	check(t, openPostgres)
}

func check(t *testing.T, open opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, open); err != nil {
		t.Fatal(err)
	}
	want := `order 1: committed
order 2: rolled back: payment declined
order 3: no gift wrap (out of gift paper)
order 3: committed
relaying 3 events:
  delivered main.OrderPlaced order:1 {"order_id":1}
  delivered main.GiftWrapped order:1 {"order_id":1}
  delivered main.OrderPlaced order:3 {"order_id":3}
all delivered
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
