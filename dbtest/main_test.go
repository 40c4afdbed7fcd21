package dbtest_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if helper := os.Getenv(helperEnv); helper != "" {
		os.Exit(runHelper(helper))
	}
	goleak.VerifyTestMain(m,
		// database/sql keeps a connection opener per pool until Close; pools are closed
		// by t.Cleanup, after which the goroutine ends on its own.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
