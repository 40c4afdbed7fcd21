package dbtest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestTmpStopTiming(t *testing.T) {
	chaosForDialects(t, []core.Dialect{core.Postgres, core.MySQL}, func(t *testing.T, db *dbtest.DB) {
		ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 12}}})
		nodesTables(t, db)
		cfg := nodesConfigFor(db)
		a := startNode(t, cfg)
		waitBalanced(t, ob, []*nodeProc{a}, []int{12}, a.started, 30*time.Second)
		time.Sleep(time.Second)
		began := time.Now()
		took := a.stop(t)
		stopped := a.waitLine(t, "STOPPED", time.Second)
		var ns int64
		fmt.Sscanf(strings.TrimPrefix(stopped, "STOPPED "), "%d", &ns)
		t.Logf("exit %v; Run returned %v after SIGTERM", took, time.Unix(0, ns).Sub(began))
	})
}
