package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/core"
)

// TestTableNameLimitIsTheCores: the CLI takes exactly the table names the core takes. A
// name of core.MaxTableLen characters prints its migration; one character more is a
// usage error naming the limit, before any connection, and the core refuses it too.
func TestTableNameLimitIsTheCores(t *testing.T) {
	longest := "t" + strings.Repeat("x", core.MaxTableLen-1)
	r := mustRun(t, "migrate", "up", "--print-sql", "--dialect", "postgres", "--table", longest)
	if !strings.Contains(r.stdout, longest+"_leases") {
		t.Fatalf("migrate --print-sql with a %d-character table does not create %s_leases: %v", len(longest), longest, r)
	}

	tooLong := longest + "x"
	for _, args := range [][]string{
		{"migrate", "up", "--print-sql", "--dialect", "postgres", "--table", tooLong},
		{"counts", "--dsn", "postgres://127.0.0.1:1/none", "--table", tooLong},
	} {
		wantFailure(t, cli(t, "", args...), exitUsage, fmt.Sprintf("invalid --table %q: use letters, digits and _ (not first), at most %d", tooLong, core.MaxTableLen))
	}
	if _, _, err := core.MigrationSQL(core.MigrateOptions{Dialect: core.Postgres, Table: tooLong}); err == nil {
		t.Fatalf("core.MigrationSQL takes the %d-character table the CLI refuses", len(tooLong))
	}
}
