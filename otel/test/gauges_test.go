package outboxerotel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// gauge returns the values of an observed instrument by some attributes ("|"-joined),
// checking its kind: a non-monotonic sum of int64 or a gauge of float64.
func gauge(t *testing.T, rm metricdata.ResourceMetrics, name string, keys ...attribute.Key) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	m, ok := find(rm, name)
	if !ok {
		return got
	}
	label := func(set attribute.Set) string {
		parts := make([]string, len(keys))
		for i, k := range keys {
			v, _ := set.Value(k)
			parts[i] = v.Emit()
		}
		return strings.Join(parts, "|")
	}
	switch data := m.Data.(type) {
	case metricdata.Sum[int64]:
		if data.IsMonotonic || data.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s is not a cumulative up-down counter", name)
		}
		for _, dp := range data.DataPoints {
			got[label(dp.Attributes)] = float64(dp.Value)
		}
	case metricdata.Gauge[float64]:
		for _, dp := range data.DataPoints {
			got[label(dp.Attributes)] = dp.Value
		}
	default:
		t.Fatalf("%s has unexpected data %T", name, m.Data)
	}
	return got
}

func wantGauge(t *testing.T, rm metricdata.ResourceMetrics, name string, want map[string]float64, keys ...attribute.Key) {
	t.Helper()
	if got := gauge(t, rm, name, keys...); !maps.Equal(got, want) {
		t.Errorf("%s by %v = %v, want %v", name, keys, got, want)
	}
}

// ageAll moves the creation and due time of the pending messages an hour into the past.
func ageAll(t *testing.T, db *dbtest.DB) {
	t.Helper()
	back := map[core.Dialect]string{
		core.Postgres: "%s - interval '1 hour'",
		core.MySQL:    "%s - INTERVAL 1 HOUR",
		core.SQLite:   "%s - 3600000000",
	}[db.Dialect]
	q := fmt.Sprintf(`UPDATE outboxer_messages SET created_at = %s, available_at = %s WHERE state = 0`,
		fmt.Sprintf(back, "created_at"), fmt.Sprintf(back, "available_at"))
	if _, err := db.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("age messages: %v", err)
	}
}

// TestGaugesFollowHealth drives an instance through known traffic, a failing relay, a
// dead message, a pause and a running node, and checks the gauges, with the counters of
// the hooks alongside, after each step.
func TestGaugesFollowHealth(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tel := newTelemetry(t)
		relay := &coretest.Recorder{}
		ob, err := core.New(core.Config{
			Name: "shop", DB: db.DB, Logger: quiet, Manual: true,
			Hooks: tel.hooks(t, outboxerotel.WithoutSpans()),
			Outboxes: map[string]core.OutboxConfig{
				"orders": {Relay: relay, Partitions: 2, MaxAttempts: 3,
					Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }}},
				"audit": {Relay: &coretest.Recorder{}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		g, err := outboxerotel.RegisterGauges(ob, outboxerotel.GaugesMeterProvider(tel.meters), outboxerotel.MinRefresh(0))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		// A second registration reads the health at most once an hour: it keeps the figures
		// of its first collection.
		cachedTel := newTelemetry(t)
		cached, err := outboxerotel.RegisterGauges(ob, outboxerotel.GaugesMeterProvider(cachedTel.meters),
			outboxerotel.MinRefresh(time.Hour), outboxerotel.GaugeOutboxes("orders"))
		if err != nil {
			t.Fatal(err)
		}
		defer cached.Close()

		by := []attribute.Key{outboxerotel.AttrName, outboxerotel.AttrOutbox}
		owners := []attribute.Key{outboxerotel.AttrOutbox, outboxerotel.AttrOwner}
		zero := map[string]float64{"shop|orders": 0, "shop|audit": 0}

		// Nothing yet: every figure is 0, and nobody owns the three partitions.
		rm := tel.collect(t)
		for _, name := range []string{outboxerotel.MetricPending, outboxerotel.MetricRetrying, outboxerotel.MetricScheduled,
			outboxerotel.MetricDeadStored, outboxerotel.MetricOldestAge, outboxerotel.MetricPaused} {
			wantGauge(t, rm, name, zero, by...)
		}
		wantGauge(t, rm, outboxerotel.MetricPartitionUnowned, map[string]float64{"shop|orders": 2, "shop|audit": 1}, by...)
		wantGauge(t, rm, outboxerotel.MetricPartitionOwned, map[string]float64{}, owners...)
		wantGauge(t, cachedTel.collect(t), outboxerotel.MetricPending, map[string]float64{"shop|orders": 0}, by...)

		// Six messages in six groups, an hour old, and one scheduled an hour ahead.
		var msgs []core.Message
		for i := range 6 {
			msgs = append(msgs, event{Box: "orders", Group: fmt.Sprintf("g%d", i), Seq: i})
		}
		envs, err := ob.PublishAll(ctx, db.DB, msgs)
		if err != nil {
			t.Fatal(err)
		}
		ageAll(t, db)
		if _, err := ob.Publish(ctx, db.DB, event{Box: "orders", Group: "later", Seq: 99}, core.WithDelay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		rm = tel.collect(t)
		wantGauge(t, rm, outboxerotel.MetricPending, map[string]float64{"shop|orders": 7, "shop|audit": 0}, by...)
		wantGauge(t, rm, outboxerotel.MetricScheduled, map[string]float64{"shop|orders": 1, "shop|audit": 0}, by...)
		if age := gauge(t, rm, outboxerotel.MetricOldestAge, by...)["shop|orders"]; age < 3600 || age > 4200 {
			t.Fatalf("oldest age %vs, want an hour and a little", age)
		}
		// The cached registration has not read the health again.
		wantGauge(t, cachedTel.collect(t), outboxerotel.MetricPending, map[string]float64{"shop|orders": 0}, by...)

		// The relay fails one message (retried in an hour) and kills another.
		retried, dead := envs[0], envs[1]
		relay.Fail = func(batch []core.Envelope) error {
			failed := map[int64]error{}
			for _, e := range batch {
				switch e.ID {
				case retried.ID:
					failed[e.ID] = errors.New("broker unavailable")
				case dead.ID:
					failed[e.ID] = core.Permanent(errors.New("message too large"))
				}
			}
			if len(failed) == 0 {
				return nil
			}
			return &core.PartialFailure{Failed: failed}
		}
		if res, err := ob.Drain(ctx, "orders"); err != nil || res != (core.DrainResult{Delivered: 4, Failed: 1, Dead: 1}) {
			t.Fatalf("Drain: %+v, %v", res, err)
		}
		rm = tel.collect(t)
		wantGauge(t, rm, outboxerotel.MetricPending, map[string]float64{"shop|orders": 2, "shop|audit": 0}, by...)
		wantGauge(t, rm, outboxerotel.MetricRetrying, map[string]float64{"shop|orders": 1, "shop|audit": 0}, by...)
		wantGauge(t, rm, outboxerotel.MetricScheduled, map[string]float64{"shop|orders": 1, "shop|audit": 0}, by...)
		wantGauge(t, rm, outboxerotel.MetricDeadStored, map[string]float64{"shop|orders": 1, "shop|audit": 0}, by...)
		if age := gauge(t, rm, outboxerotel.MetricOldestAge, by...)["shop|orders"]; age < 3600 || age > 4200 {
			t.Fatalf("oldest age after the failure %vs, want an hour and a little", age)
		}
		// The hooks counted the same traffic.
		checkSeries(t, rm, outboxerotel.MetricPublished, map[string]int64{"shop|orders": 7}, by...)
		checkSeries(t, rm, outboxerotel.MetricDelivered, map[string]int64{"shop|orders": 4}, by...)
		checkSeries(t, rm, outboxerotel.MetricFailed, map[string]int64{"shop|orders": 1}, by...)
		checkSeries(t, rm, outboxerotel.MetricDead, map[string]int64{"shop|orders": 1}, by...)

		// Paused.
		if err := ob.Pause(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		wantGauge(t, tel.collect(t), outboxerotel.MetricPaused, map[string]float64{"shop|orders": 1, "shop|audit": 0}, by...)
		if err := ob.Resume(ctx, "orders"); err != nil {
			t.Fatal(err)
		}

		// A node runs both outboxes: it owns every partition.
		node, err := core.New(core.Config{DB: db.DB, Logger: quiet, Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: &coretest.Recorder{}, Partitions: 2},
			"audit":  {Relay: &coretest.Recorder{}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stopRun := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- node.Run(runCtx) }()
		defer func() {
			stopRun()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		for deadline := time.Now().Add(20 * time.Second); ; {
			rm = tel.collect(t)
			if maps.Equal(gauge(t, rm, outboxerotel.MetricPartitionUnowned, by...), map[string]float64{"shop|orders": 0, "shop|audit": 0}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the node did not own every partition: %v", gauge(t, rm, outboxerotel.MetricPartitionUnowned, by...))
			}
			time.Sleep(10 * time.Millisecond)
		}
		got := gauge(t, rm, outboxerotel.MetricPartitionOwned, owners...)
		if len(got) != 2 {
			t.Fatalf("owned partitions: %v", got)
		}
		for k, n := range got {
			outbox, owner, _ := strings.Cut(k, "|")
			if want := map[string]float64{"orders": 2, "audit": 1}[outbox]; n != want || owner == "" {
				t.Fatalf("owned partitions: %v", got)
			}
		}

		// Closed: nothing is observed any more.
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		rm = tel.collect(t)
		wantGauge(t, rm, outboxerotel.MetricPending, map[string]float64{}, by...)
	})
}

// TestGaugesReadFailure: when the health cannot be read, the collection reports the error
// and no stale values.
func TestGaugesReadFailure(t *testing.T) {
	db := dbtest.SQLite(t)
	ob, err := core.New(core.Config{DB: db.DB, Logger: quiet, PublishOnly: true,
		Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	g, err := outboxerotel.RegisterGauges(ob, outboxerotel.GaugesMeterProvider(mp), outboxerotel.MinRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	wantGauge(t, rm, outboxerotel.MetricPending, map[string]float64{"outboxer|orders": 0}, outboxerotel.AttrName, outboxerotel.AttrOutbox)

	if _, err := db.ExecContext(context.Background(), `DROP TABLE outboxer_messages`); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(context.Background(), &rm); err == nil || !strings.Contains(err.Error(), "outboxerotel: gauges:") {
		t.Fatalf("Collect after the table was dropped: %v, want the health's error", err)
	}
	wantGauge(t, rm, outboxerotel.MetricPending, map[string]float64{}, outboxerotel.AttrName, outboxerotel.AttrOutbox)
}

func TestRegisterGaugesRefusesBadOptions(t *testing.T) {
	db := dbtest.SQLite(t)
	ob, err := core.New(core.Config{DB: db.DB, Logger: quiet, PublishOnly: true,
		Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opt  outboxerotel.GaugeOption
		want string
	}{
		{outboxerotel.MinRefresh(-time.Second), "MinRefresh: must be 0 or positive"},
		{outboxerotel.HealthTimeout(0), "HealthTimeout: must be positive"},
		{outboxerotel.GaugesMeterProvider(nil), "GaugesMeterProvider: the provider is nil"},
		{outboxerotel.GaugeOutboxes(), "GaugeOutboxes: no outbox named"},
		{outboxerotel.GaugeOutboxes("orders", "nope"), `unknown outbox "nope"`},
	} {
		g, err := outboxerotel.RegisterGauges(ob, c.opt)
		if err == nil || g != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RegisterGauges with a bad option: %v, want %q", err, c.want)
		}
	}
	if _, err := outboxerotel.RegisterGauges(ob, outboxerotel.GaugeOutboxes("nope")); !errors.Is(err, core.ErrUnknownOutbox) {
		t.Errorf("an unknown outbox: %v, want ErrUnknownOutbox", err)
	}
	if _, err := outboxerotel.RegisterGauges(nil); err == nil {
		t.Error("RegisterGauges(nil) succeeded")
	}
}
