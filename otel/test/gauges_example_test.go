package outboxerotel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// Observe the backlog, the dead messages and the partition owners of an instance. Here a
// manual reader collects them after a relay rejected one message for good.
func ExampleRegisterGauges() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxerotel")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(filepath.Join(dir, "app.db"))+"?_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	relay := &coretest.Recorder{Fail: func(batch []core.Envelope) error {
		return &core.PartialFailure{Failed: map[int64]error{batch[0].ID: core.Permanent(errors.New("rejected"))}}
	}}
	ob, err := core.New(core.Config{
		DB: db, Manual: true, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer meters.Shutdown(ctx)
	gauges, err := outboxerotel.RegisterGauges(ob, outboxerotel.GaugesMeterProvider(meters))
	if err != nil {
		log.Fatal(err)
	}
	defer gauges.Close()

	for i := range 3 {
		if _, err := ob.Publish(ctx, db, orderPlaced{OrderID: i}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := ob.Drain(ctx, "orders"); err != nil { // the first is dead, the others delivered
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && len(sum.DataPoints) == 1 {
			fmt.Println(m.Name, sum.DataPoints[0].Value)
		}
	}
	// Unordered output:
	// outboxer.outbox.pending 0
	// outboxer.outbox.retrying 0
	// outboxer.outbox.scheduled 0
	// outboxer.outbox.dead 1
	// outboxer.partitions.unowned 1
}
