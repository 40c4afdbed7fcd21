package outboxerotel_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// event is the message the tests publish.
type event struct {
	Box   string `json:"-"`
	Group string `json:"group,omitempty"`
	Seq   int    `json:"seq"`
}

func (e event) Outbox() string   { return e.Box }
func (e event) GroupKey() string { return e.Group }

var quiet = slog.New(slog.DiscardHandler)

// telemetry is an in-memory OpenTelemetry pipeline: a manual metric reader and a span
// recorder.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	meters *sdkmetric.MeterProvider
	tracer *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() {
		ctx := context.Background()
		if err := tel.meters.Shutdown(ctx); err != nil {
			t.Errorf("meter provider shutdown: %v", err)
		}
		if err := tel.tracer.Shutdown(ctx); err != nil {
			t.Errorf("tracer provider shutdown: %v", err)
		}
	})
	return tel
}

func (tel *telemetry) hooks(t *testing.T, opts ...outboxerotel.Option) core.Hooks {
	t.Helper()
	h, err := outboxerotel.Hooks(append([]outboxerotel.Option{
		outboxerotel.WithMeterProvider(tel.meters), outboxerotel.WithTracerProvider(tel.tracer),
	}, opts...)...)
	if err != nil {
		t.Fatalf("Hooks: %v", err)
	}
	return h
}

func (tel *telemetry) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// series is a metric's values by the values of some attributes, "|"-joined; zero values are
// left out.
func series(t *testing.T, rm metricdata.ResourceMetrics, name string, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return map[string]int64{}
	}
	label := func(set attribute.Set) string {
		var parts []string
		for _, k := range keys {
			v, ok := set.Value(k)
			if !ok {
				parts = append(parts, "-")
				continue
			}
			parts = append(parts, v.Emit())
		}
		return strings.Join(parts, "|")
	}
	got := map[string]int64{}
	switch data := m.Data.(type) {
	case metricdata.Sum[int64]:
		if !data.IsMonotonic || data.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s is not a cumulative monotonic counter", name)
		}
		for _, dp := range data.DataPoints {
			if dp.Value != 0 {
				got[label(dp.Attributes)] += dp.Value
			}
		}
	case metricdata.Histogram[int64]:
		for _, dp := range data.DataPoints {
			got[label(dp.Attributes)] += dp.Sum
		}
	case metricdata.Histogram[float64]:
		for _, dp := range data.DataPoints {
			got[label(dp.Attributes)] += int64(dp.Count)
		}
	default:
		t.Fatalf("%s has unexpected data %T", name, m.Data)
	}
	return got
}

func checkSeries(t *testing.T, rm metricdata.ResourceMetrics, name string, want map[string]int64, keys ...attribute.Key) {
	t.Helper()
	for k, v := range want {
		if v == 0 {
			delete(want, k)
		}
	}
	if got := series(t, rm, name, keys...); !maps.Equal(got, want) {
		t.Errorf("%s by %v = %v, want %v", name, keys, got, want)
	}
}

func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func itoa(n int) string { return attribute.IntValue(n).Emit() }

// TestEngineEventsBecomeMetricsAndSpans drives a real instance on SQLite through
// deliveries, a retry, a dead message, pruning and a batch whose lease is taken away, and
// checks every counter, histogram and span against what happened.
func TestEngineEventsBecomeMetricsAndSpans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := dbtest.SQLite(t)
	tel := newTelemetry(t)

	// The user's own hooks, chained after the bridge, count the batches the engine ran.
	stops, exceptions := 0, 0
	mine := core.Hooks{
		OnBatchStop:      func(core.BatchEvent) { stops++ },
		OnBatchException: func(core.BatchEvent) { exceptions++ },
	}
	orders := &coretest.Recorder{}
	audit := &coretest.Recorder{}
	ob, err := core.New(core.Config{
		Name:   "shop",
		DB:     db.DB,
		Logger: quiet,
		Manual: true,
		Hooks:  outboxerotel.Combine(tel.hooks(t), mine),
		Outboxes: map[string]core.OutboxConfig{
			"orders": {
				Relay:       orders,
				Partitions:  2,
				MaxAttempts: 2,
				Backoff:     core.Backoff{Func: func(int) time.Duration { return 0 }},
				Retention:   core.KeepFor(time.Millisecond),
			},
			"audit": {Relay: audit},
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}

	msgs := []core.Message{
		event{Box: "orders", Group: "a", Seq: 1},
		event{Box: "orders", Group: "a", Seq: 2},
		event{Box: "orders", Group: "b", Seq: 3},
		event{Box: "orders", Group: "c", Seq: 4}, // poison: fails every time, dead after 2 attempts
		event{Box: "orders", Group: "d", Seq: 5}, // flaky: fails once, then is delivered
		event{Box: "orders", Seq: 6},
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := ob.PublishAll(ctx, tx, msgs)
	if err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	poison, flaky := envs[3], envs[4]
	failedOnce := false
	orders.Fail = func(batch []core.Envelope) error {
		failed := map[int64]error{}
		for _, e := range batch {
			switch {
			case e.ID == poison.ID:
				failed[e.ID] = errors.New("poison")
			case e.ID == flaky.ID && !failedOnce:
				failedOnce = true
				failed[e.ID] = errors.New("flaky")
			}
		}
		if len(failed) == 0 {
			return nil
		}
		return &core.PartialFailure{Failed: failed}
	}

	// What each partition should see, from where the engine put the messages.
	delivered, failed, dead := map[string]int64{}, map[string]int64{}, map[string]int64{}
	busy := map[int]bool{}
	for _, e := range envs {
		busy[e.Partition] = true
		p := "shop|orders|" + itoa(e.Partition) + "|*coretest.Recorder"
		if e.ID != poison.ID {
			delivered[p]++
		}
		if e.ID == poison.ID || e.ID == flaky.ID {
			failed[p]++
		}
		if e.ID == poison.ID {
			dead[p]++
		}
	}
	if len(busy) != 2 {
		t.Fatalf("the messages landed in partitions %v; the test needs both", busy)
	}

	// Drain until nothing is pending: every message but the poison is delivered, the
	// poison and the flaky one fail once each, and the poison is dead at its second attempt.
	var total core.DrainResult
	for range 5 {
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
		total.Delivered, total.Failed, total.Dead = total.Delivered+res.Delivered, total.Failed+res.Failed, total.Dead+res.Dead
		c, err := ob.Counts(ctx, "orders")
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		if c.Pending == 0 {
			break
		}
	}
	if total != (core.DrainResult{Delivered: 5, Failed: 2, Dead: 1}) {
		t.Fatalf("drains did %+v, want 5 delivered, 2 failed, 1 dead", total)
	}
	// One batch per busy partition, then one retry batch per partition holding a failed message.
	wantOrderBatches := len(busy) + len(map[int]bool{poison.Partition: true, flaky.Partition: true})
	if stops != wantOrderBatches {
		t.Fatalf("the engine ran %d batches, want %d", stops, wantOrderBatches)
	}

	// Retention keeps the delivered messages for a millisecond: prune until all five are
	// gone, within a bound.
	var pruned int64
	for deadline := time.Now().Add(10 * time.Second); pruned < 5 && time.Now().Before(deadline); {
		n, err := ob.PruneNow(ctx, "orders")
		if err != nil {
			t.Fatalf("PruneNow: %v", err)
		}
		pruned += n
	}
	if pruned != 5 {
		t.Fatalf("pruned %d, want the 5 delivered messages", pruned)
	}

	// A batch whose partition lease is taken away during delivery ends in an exception.
	if _, err := ob.Publish(ctx, db.DB, event{Box: "audit", Seq: 7}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	audit.Fail = func([]core.Envelope) error {
		_, err := db.ExecContext(ctx, `UPDATE outboxer_messages_leases SET token = token + 1 WHERE outbox = 'audit'`)
		return err
	}
	if _, err := ob.Drain(ctx, "audit"); !errors.Is(err, core.ErrLeaseLost) {
		t.Fatalf("Drain of audit with a stolen lease: %v, want ErrLeaseLost", err)
	}
	if exceptions != 1 {
		t.Fatalf("the engine raised %d batch exceptions, want 1", exceptions)
	}

	rm := tel.collect(t)
	by := []attribute.Key{outboxerotel.AttrName, outboxerotel.AttrOutbox}
	batch := []attribute.Key{outboxerotel.AttrName, outboxerotel.AttrOutbox, outboxerotel.AttrPartition, outboxerotel.AttrRelay}
	checkSeries(t, rm, outboxerotel.MetricPublished, map[string]int64{"shop|orders": 6, "shop|audit": 1}, by...)
	checkSeries(t, rm, outboxerotel.MetricDelivered, delivered, batch...)
	checkSeries(t, rm, outboxerotel.MetricFailed, failed, batch...)
	checkSeries(t, rm, outboxerotel.MetricDead, dead, batch...)
	checkSeries(t, rm, outboxerotel.MetricPruned, map[string]int64{"shop|orders": 5}, by...)

	// Histograms: the batch count by outcome, and the messages handed over.
	outcome := []attribute.Key{outboxerotel.AttrOutbox, outboxerotel.AttrErrorType}
	checkSeries(t, rm, outboxerotel.MetricBatchDuration,
		map[string]int64{"orders|-": int64(wantOrderBatches), "audit|lease_lost": 1}, outcome...)
	handed := int64(len(envs) + 2) // every message once, the two failed ones twice
	checkSeries(t, rm, outboxerotel.MetricBatchSize,
		map[string]int64{"orders|-": handed, "audit|lease_lost": 1}, outcome...)
	if m, ok := find(rm, outboxerotel.MetricBatchDuration); !ok || m.Unit != "s" {
		t.Errorf("batch duration unit = %q, want s", m.Unit)
	}

	// Spans: one per batch, ended, named, with the outcome as status (the publish spans
	// are tested in trace_test.go).
	var spans []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.SpanKind() != trace.SpanKindProducer {
			spans = append(spans, s)
		}
	}
	if len(tel.spans.Started()) != len(tel.spans.Ended()) {
		t.Errorf("%d spans started, %d ended", len(tel.spans.Started()), len(tel.spans.Ended()))
	}
	if len(spans) != wantOrderBatches+1 {
		t.Fatalf("%d spans, want %d", len(spans), wantOrderBatches+1)
	}
	var retryEvents, deadEvents []int64
	for _, s := range spans {
		if s.Name() != outboxerotel.SpanBatch {
			t.Errorf("span named %q, want %q", s.Name(), outboxerotel.SpanBatch)
		}
		if got := spanAttr(s, outboxerotel.AttrName).AsString(); got != "shop" {
			t.Errorf("span outboxer.name = %q", got)
		}
		outbox := spanAttr(s, outboxerotel.AttrOutbox).AsString()
		count := spanAttr(s, outboxerotel.AttrCount).AsInt64()
		nFailed := spanAttr(s, outboxerotel.AttrFailed).AsInt64() + spanAttr(s, outboxerotel.AttrDead).AsInt64()
		switch {
		case outbox == "audit":
			if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, core.ErrLeaseLost.Error()) {
				t.Errorf("audit span status %+v, want an error naming the lost lease", s.Status())
			}
			if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("audit span events %v, want the recorded error", ev)
			}
			if got := spanAttr(s, outboxerotel.AttrErrorType).AsString(); got != "lease_lost" {
				t.Errorf("audit span error.type = %q", got)
			}
		case outbox != "orders":
			t.Errorf("span of outbox %q", outbox)
		case nFailed > 0:
			if s.Status().Code != codes.Error {
				t.Errorf("a batch with %d of %d failed has status %+v", nFailed, count, s.Status())
			}
		default:
			if s.Status().Code != codes.Unset {
				t.Errorf("a delivered batch has status %+v", s.Status())
			}
		}
		for _, ev := range s.Events() {
			var id int64
			for _, kv := range ev.Attributes {
				if kv.Key == outboxerotel.AttrMessageID {
					id = kv.Value.AsInt64()
				}
			}
			switch ev.Name {
			case outboxerotel.EventRetry:
				retryEvents = append(retryEvents, id)
			case outboxerotel.EventDead:
				deadEvents = append(deadEvents, id)
			}
		}
	}
	if len(retryEvents) != 2 || len(deadEvents) != 1 || deadEvents[0] != poison.ID {
		t.Errorf("retry events for %v and dead events for %v, want retries of %d and %d and the death of %d",
			retryEvents, deadEvents, poison.ID, flaky.ID, poison.ID)
	}
}

// TestPublishToSeveralOutboxes: one event counts the messages of all its outboxes, so the
// count carries no outbox attribute.
func TestPublishToSeveralOutboxes(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	tel := newTelemetry(t)
	ob, err := core.New(core.Config{
		DB: db.DB, Logger: quiet, PublishOnly: true, Hooks: tel.hooks(t, outboxerotel.WithoutSpans()),
		Outboxes: map[string]core.OutboxConfig{"orders": {}, "audit": {}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := ob.PublishAll(ctx, db.DB, []core.Message{event{Box: "orders"}, event{Box: "audit"}, event{Box: "orders"}}); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	if _, err := ob.Publish(ctx, db.DB, event{Box: "audit"}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	checkSeries(t, tel.collect(t), outboxerotel.MetricPublished,
		map[string]int64{core.DefaultName + "|-": 3, core.DefaultName + "|audit": 1},
		outboxerotel.AttrName, outboxerotel.AttrOutbox)
}

// TestWithoutSpansStartsNone: metrics still flow, and no span is started.
func TestWithoutSpansStartsNone(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	tel := newTelemetry(t)
	rec := &coretest.Recorder{}
	ob, err := core.New(core.Config{
		DB: db.DB, Logger: quiet, Manual: true, Hooks: tel.hooks(t, outboxerotel.WithoutSpans()),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := ob.PublishAll(ctx, db.DB, []core.Message{event{Box: "orders", Seq: 1}, event{Box: "orders", Seq: 2}}); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if n := len(tel.spans.Started()); n != 0 {
		t.Errorf("%d spans started, want none", n)
	}
	checkSeries(t, tel.collect(t), outboxerotel.MetricDelivered, map[string]int64{"orders": 2}, outboxerotel.AttrOutbox)
}

func TestOptionsAreValidated(t *testing.T) {
	for name, opt := range map[string]outboxerotel.Option{
		"WithMeterProvider":  outboxerotel.WithMeterProvider(nil),
		"WithTracerProvider": outboxerotel.WithTracerProvider(nil),
	} {
		_, err := outboxerotel.Hooks(opt)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Hooks(%s(nil)) = %v, want an error naming the option", name, err)
		}
	}
}

func TestCombineCallsEachHookInOrder(t *testing.T) {
	var calls []string
	rec := func(tag string) func(core.BatchEvent) {
		return func(ev core.BatchEvent) { calls = append(calls, tag+":"+ev.Outbox) }
	}
	h := outboxerotel.Combine(
		core.Hooks{OnBatchStop: rec("first")},
		core.Hooks{},
		core.Hooks{OnBatchStop: rec("second"), OnPrune: func(core.PruneEvent) { calls = append(calls, "prune") }},
	)
	h.OnBatchStop(core.BatchEvent{Outbox: "orders"})
	h.OnPrune(core.PruneEvent{})
	if want := []string{"first:orders", "second:orders", "prune"}; !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	if h.OnPublish != nil || h.OnBatchStart != nil || h.OnBatchException != nil || h.OnRetry != nil || h.OnDead != nil {
		t.Error("an event no hook handles should stay nil, so the engine skips it")
	}
	if got := outboxerotel.Combine(); got.OnBatchStop != nil || got.OnPrune != nil {
		t.Error("Combine() should handle nothing")
	}
}

// TestConcurrentPartitions runs an instance with four partitions delivering at once:
// every batch's span is ended by its own partition's stop, and the counts add up.
func TestConcurrentPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := dbtest.SQLite(t)
	tel := newTelemetry(t)
	rec := &coretest.Recorder{}
	ob, err := core.New(core.Config{
		DB: db.DB, Logger: quiet, Hooks: tel.hooks(t),
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, Partitions: 4, BatchSize: 10, PollInterval: 5 * time.Millisecond,
		}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	const n = 200
	msgs := make([]core.Message, n)
	for i := range msgs {
		msgs[i] = event{Box: "orders", Group: "g" + itoa(i%16), Seq: i}
	}
	if _, err := ob.PublishAll(ctx, db.DB, msgs); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ob.Run(runCtx) }()
	for deadline := time.Now().Add(30 * time.Second); len(rec.Delivered()) < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := len(rec.Delivered()); got != n {
		t.Fatalf("delivered %d, want %d", got, n)
	}

	rm := tel.collect(t)
	checkSeries(t, rm, outboxerotel.MetricPublished, map[string]int64{"orders": n}, outboxerotel.AttrOutbox)
	checkSeries(t, rm, outboxerotel.MetricDelivered, map[string]int64{"orders": n}, outboxerotel.AttrOutbox)
	checkSeries(t, rm, outboxerotel.MetricBatchSize, map[string]int64{"orders": n}, outboxerotel.AttrOutbox)

	started, all := tel.spans.Started(), tel.spans.Ended()
	if len(started) != len(all) {
		t.Fatalf("%d spans started, %d ended", len(started), len(all))
	}
	var ended []sdktrace.ReadOnlySpan // the batch spans (the publish span is left out)
	for _, s := range all {
		if s.Name() == outboxerotel.SpanBatch {
			ended = append(ended, s)
		}
	}
	var sum int64
	parts := map[int64]bool{}
	for _, s := range ended {
		sum += spanAttr(s, outboxerotel.AttrDelivered).AsInt64()
		parts[spanAttr(s, outboxerotel.AttrPartition).AsInt64()] = true
		if c := spanAttr(s, outboxerotel.AttrCount).AsInt64(); c != spanAttr(s, outboxerotel.AttrDelivered).AsInt64() {
			t.Errorf("a span of %d messages says %d delivered", c, spanAttr(s, outboxerotel.AttrDelivered).AsInt64())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("span status %+v, want unset", s.Status())
		}
	}
	if sum != n || len(ended) != int(series(t, rm, outboxerotel.MetricBatchDuration)[""]) {
		t.Errorf("spans delivered %d in %d spans, want %d in as many spans as batches", sum, len(ended), n)
	}
	if len(parts) != 4 {
		t.Errorf("spans from partitions %v, want all four", parts)
	}
}
