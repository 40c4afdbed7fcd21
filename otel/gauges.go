package outboxerotel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxer-go/outboxer/core"
)

// The names of the instruments RegisterGauges observes. OpenTelemetry's messaging
// conventions define no metric for a backlog, so they are outboxer's own, with UCUM
// units. The counts are asynchronous up-down counters (their values add up across
// outboxes and owners; Prometheus shows them as gauges), the age and the pause are
// asynchronous gauges.
const (
	MetricPending          = "outboxer.outbox.pending"     // {message}: the backlog
	MetricRetrying         = "outboxer.outbox.retrying"    // {message}: pending after a failure
	MetricScheduled        = "outboxer.outbox.scheduled"   // {message}: pending, not due yet
	MetricDeadStored       = "outboxer.outbox.dead"        // {message}: dead, awaiting retry or discard
	MetricOldestAge        = "outboxer.outbox.oldest_age"  // s: how long the oldest due message has waited
	MetricPaused           = "outboxer.outbox.paused"      // 1 when paused, 0 otherwise
	MetricPartitionOwned   = "outboxer.partitions.owned"   // {partition}: per owner
	MetricPartitionUnowned = "outboxer.partitions.unowned" // {partition}: no live owner
)

// AttrOwner names the node holding partitions ("host/pid/random", as core.Health has it).
const AttrOwner = attribute.Key("outboxer.owner")

// DefaultMinRefresh is how often, at most, RegisterGauges reads the health by default.
const DefaultMinRefresh = 10 * time.Second

// DefaultHealthTimeout bounds one read of the health by default.
const DefaultHealthTimeout = 5 * time.Second

// GaugeOption configures RegisterGauges.
type GaugeOption func(*gaugeConfig) error

type gaugeConfig struct {
	meters   metric.MeterProvider
	refresh  time.Duration
	timeout  time.Duration
	outboxes []string
}

// GaugesMeterProvider observes the gauges through mp instead of the global provider.
func GaugesMeterProvider(mp metric.MeterProvider) GaugeOption {
	return func(c *gaugeConfig) error {
		if mp == nil {
			return errors.New("GaugesMeterProvider: the provider is nil")
		}
		c.meters = mp
		return nil
	}
}

// MinRefresh sets how old the health may be before a collection reads it again
// (DefaultMinRefresh, 10 s, when not given). Collections in between report the
// figures of the last read, so several readers or a fast scrape interval cost the
// database nothing more; the trade-off is that the values lag by up to d. 0 reads at
// every collection.
func MinRefresh(d time.Duration) GaugeOption {
	return func(c *gaugeConfig) error {
		if d < 0 {
			return fmt.Errorf("MinRefresh: must be 0 or positive, got %v", d)
		}
		c.refresh = d
		return nil
	}
}

// HealthTimeout bounds one read of the health (DefaultHealthTimeout, 5 s, when not
// given), so that a slow database does not hold up the collection of every other metric.
func HealthTimeout(d time.Duration) GaugeOption {
	return func(c *gaugeConfig) error {
		if d <= 0 {
			return fmt.Errorf("HealthTimeout: must be positive, got %v", d)
		}
		c.timeout = d
		return nil
	}
}

// GaugeOutboxes observes only the named outboxes (every outbox of the instance when not
// given). Each must be configured on the instance.
func GaugeOutboxes(names ...string) GaugeOption {
	return func(c *gaugeConfig) error {
		if len(names) == 0 {
			return errors.New("GaugeOutboxes: no outbox named")
		}
		c.outboxes = slices.Clone(names)
		return nil
	}
}

// Gauges is the registration of an instance's health gauges. Close it to stop
// observing them (before closing the instance's database, say).
type Gauges struct {
	ob   *core.Outboxer
	cfg  gaugeConfig
	name attribute.KeyValue

	pending, retrying, scheduled, dead, owned, unowned metric.Int64ObservableUpDownCounter
	age, paused                                        metric.Float64ObservableGauge

	reg       metric.Registration
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // one read of the health at a time
	last    core.Health
	lastErr error
	readAt  time.Time // when the last read was attempted (zero: never)
}

// RegisterGauges observes the health of an instance (core.Outboxer.Health) as
// OpenTelemetry metrics: per outbox its backlog, retrying, scheduled and dead messages,
// the age of its oldest due message and whether it is paused; per outbox and owner the
// partitions held; per outbox the partitions no node holds. Every series carries
// outboxer.name and outboxer.outbox, the owned partitions also outboxer.owner.
//
// The health is read when the meter provider collects (a Prometheus scrape, a periodic
// reader's tick), at most once per MinRefresh, and each read is two short queries per
// outbox. A read that fails reports no values (and the error to the SDK, which hands it
// to otel.Handle) until a later collection reads successfully; it is not retried before
// MinRefresh either, so a struggling database is not pressed harder.
//
// The health covers every node sharing the tables: register the gauges on one node, or
// on each and aggregate by outboxer.name and outboxer.outbox with max, not sum. The
// instance may be publish-only; it does not have to run.
func RegisterGauges(ob *core.Outboxer, opts ...GaugeOption) (*Gauges, error) {
	if ob == nil {
		return nil, errors.New("outboxerotel: RegisterGauges: the instance is nil")
	}
	cfg := gaugeConfig{refresh: DefaultMinRefresh, timeout: DefaultHealthTimeout}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, fmt.Errorf("outboxerotel: %w", err)
		}
	}
	configured := ob.Outboxes()
	for _, name := range cfg.outboxes {
		if !slices.Contains(configured, name) {
			return nil, fmt.Errorf("outboxerotel: GaugeOutboxes: %w %q", core.ErrUnknownOutbox, name)
		}
	}
	if cfg.meters == nil {
		cfg.meters = otel.GetMeterProvider()
	}
	g := &Gauges{ob: ob, cfg: cfg, name: AttrName.String(ob.Config().Name)}
	m := cfg.meters.Meter(ScopeName)
	var err error
	count := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		c, e := m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return c
	}
	g.pending = count(MetricPending, "{message}", "Messages not yet delivered and not dead, including those waiting for a retry or scheduled.")
	g.retrying = count(MetricRetrying, "{message}", "Pending messages that failed at least once; with ordering on, each holds back its group.")
	g.scheduled = count(MetricScheduled, "{message}", "Pending messages published with a delay that is not over yet.")
	g.dead = count(MetricDeadStored, "{message}", "Dead messages waiting for RetryDead or Discard.")
	g.owned = count(MetricPartitionOwned, "{partition}", "Partitions a node holds a live lease on.")
	g.unowned = count(MetricPartitionUnowned, "{partition}", "Partitions no node holds a live lease on: nobody delivers them.")
	var e error
	g.age, e = m.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due message of the outbox has waited; 0 when none is due."))
	err = errors.Join(err, e)
	g.paused, e = m.Float64ObservableGauge(MetricPaused,
		metric.WithDescription("1 when the outbox is paused on every node, 0 otherwise."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("outboxerotel: %w", err)
	}
	g.reg, err = m.RegisterCallback(g.observe, g.pending, g.retrying, g.scheduled, g.dead, g.owned, g.unowned, g.age, g.paused)
	if err != nil {
		return nil, fmt.Errorf("outboxerotel: %w", err)
	}
	return g, nil
}

// Close stops observing the gauges. It may be called more than once.
func (g *Gauges) Close() error {
	g.closeOnce.Do(func() { g.closeErr = g.reg.Unregister() })
	return g.closeErr
}

// health returns the cached health, reading it again when it is older than MinRefresh.
func (g *Gauges) health(ctx context.Context) (core.Health, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.readAt.IsZero() && time.Since(g.readAt) < g.cfg.refresh {
		return g.last, g.lastErr
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.timeout)
	defer cancel()
	g.readAt = time.Now()
	g.last, g.lastErr = g.ob.Health(ctx, g.cfg.outboxes...)
	if g.lastErr != nil {
		g.lastErr = fmt.Errorf("outboxerotel: gauges: %w", g.lastErr)
	}
	return g.last, g.lastErr
}

func (g *Gauges) observe(ctx context.Context, o metric.Observer) error {
	h, err := g.health(ctx)
	if err != nil {
		return err
	}
	for _, oh := range h.Outboxes {
		attrs := metric.WithAttributeSet(attribute.NewSet(g.name, AttrOutbox.String(oh.Outbox)))
		o.ObserveInt64(g.pending, oh.Pending, attrs)
		o.ObserveInt64(g.retrying, oh.Retrying, attrs)
		o.ObserveInt64(g.scheduled, oh.Scheduled, attrs)
		o.ObserveInt64(g.dead, oh.Dead, attrs)
		o.ObserveInt64(g.unowned, int64(len(oh.Unowned)), attrs)
		o.ObserveFloat64(g.age, oh.OldestAge.Seconds(), attrs)
		paused := 0.0
		if oh.Paused {
			paused = 1
		}
		o.ObserveFloat64(g.paused, paused, attrs)
		for owner, n := range oh.Owners {
			o.ObserveInt64(g.owned, int64(n), metric.WithAttributeSet(attribute.NewSet(
				g.name, AttrOutbox.String(oh.Outbox), AttrOwner.String(owner))))
		}
	}
	return nil
}
