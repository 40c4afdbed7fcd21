package outboxerotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

type orderPlaced struct {
	OrderID int `json:"order_id"`
}

func (orderPlaced) Outbox() string { return "orders" }

// Record an instance's metrics with an OpenTelemetry SDK meter provider; here a manual
// reader collects them, where a service would export them.
func Example() {
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

	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer meters.Shutdown(ctx)

	hooks, err := outboxerotel.Hooks(outboxerotel.WithMeterProvider(meters), outboxerotel.WithoutSpans())
	if err != nil {
		log.Fatal(err)
	}
	ob, err := core.New(core.Config{
		DB:       db,
		Manual:   true, // deliver with Drain, for the example; a service calls Run
		Logger:   slog.New(slog.DiscardHandler),
		Hooks:    hooks,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &coretest.Recorder{}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ob.PublishAll(ctx, tx, []core.Message{orderPlaced{1}, orderPlaced{2}, orderPlaced{3}}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			var n int64
			for _, dp := range sum.DataPoints {
				n += dp.Value
			}
			fmt.Println(m.Name, n)
		}
		if h, ok := m.Data.(metricdata.Histogram[int64]); ok {
			fmt.Println(m.Name, "batches:", h.DataPoints[0].Count, "messages:", h.DataPoints[0].Sum)
		}
	}
	// Output:
	// outboxer.messages.published 3
	// outboxer.messages.delivered 3
	// outboxer.messages.failed 0
	// outboxer.messages.dead 0
	// outboxer.batch.size batches: 1 messages: 3
}
