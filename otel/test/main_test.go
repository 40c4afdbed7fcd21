package outboxerotel_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps a connection opener per pool until Close; pools are closed by
		// t.Cleanup, after which the goroutine ends on its own.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
