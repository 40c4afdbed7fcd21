package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
	"github.com/outboxer-go/outboxer/internal/dbtime"
)

// Health is what the database says about the outboxes of an instance at one moment: how
// far delivery lags behind, what failed, and who delivers. Read it with
// (*Outboxer).Health; turn it into an error for a readiness check or an alert with Check.
type Health struct {
	// At is the database clock when the health was read; the ages are measured from it.
	At time.Time
	// Outboxes in the order asked for (sorted by name when all were asked for).
	Outboxes []OutboxHealth
}

// OutboxHealth is the health of one outbox, across every node sharing its table.
type OutboxHealth struct {
	Outbox string
	// Pending is the backlog: every message not yet delivered and not dead, including
	// those waiting for a retry (Retrying) and scheduled ones not due yet (Scheduled).
	Pending int64
	// Retrying counts the pending messages that failed at least once. With ordering on,
	// each holds back the rest of its group.
	Retrying int64
	// Scheduled counts the pending messages published with a delay that is not over yet,
	// and never attempted. They are not late.
	Scheduled int64
	// OldestAge is how long the oldest due message has been waiting: since it was
	// published, or since its scheduled time for a delayed message not attempted yet.
	// Scheduled messages do not count. 0 when nothing is due. This is the lag of delivery:
	// it grows while the relay fails or nobody delivers, whatever the volume.
	OldestAge time.Duration
	// Dead counts the messages that failed for the last time (MaxAttempts, or Permanent)
	// and wait for RetryDead or Discard.
	Dead int64
	// Paused: the outbox was paused (Pause, OutboxConfig.Paused) and is not delivered.
	Paused bool
	// Owners maps each node holding a live lease on a partition of the outbox (the owner
	// name of a running instance, (*Outboxer).Owner: "name@host/pid/random") to how many
	// partitions it holds.
	Owners map[string]int
	// Nodes lists the live relay nodes of the outbox (those whose heartbeat has not run
	// out), sorted by name, with their share and what they hold. It is nil when the
	// nodes table cannot be read (tables migrated by an earlier version: run Migrate).
	Nodes []NodeHealth
	// Unowned lists the partitions no node holds a live lease on: nobody delivers them.
	// Right after a node starts, or within about LeaseDuration of a node dying, this is
	// normal; for longer it means no relay runs.
	Unowned []int
	// Partitions has the same figures per partition, in partition order: every configured
	// partition, and any other that still has a lease row or messages.
	Partitions []PartitionHealth
}

// PartitionHealth is the health of one partition of an outbox.
type PartitionHealth struct {
	Partition int
	// Pending, Retrying, Scheduled, OldestAge and Dead are as in OutboxHealth, for this
	// partition alone.
	Pending, Retrying, Scheduled int64
	OldestAge                    time.Duration
	Dead                         int64
	// Owner holds the partition's lease, or held it last when that lease ran out
	// without being released (a node that crashed or lost the database). It is "" when
	// nobody ever held it, and after its owner released it on a graceful stop.
	// LeaseHeld says whether the lease is live, and LeaseExpires (zero when it is not)
	// when it runs out unless renewed. Token counts the takeovers of the partition.
	Owner        string
	LeaseHeld    bool
	LeaseExpires time.Time
	Token        int64
	Paused       bool
}

// NodeHealth is one live relay node of an outbox.
type NodeHealth struct {
	// Node is its owner name ((*Outboxer).Owner).
	Node string
	// Joined is the database clock at the heartbeat that made it live. Partitions are
	// dealt to the nodes in join order (then by name), so a node that joins later stands
	// by when the nodes already there hold every partition.
	Joined time.Time
	// LastHeartbeat is the database clock at its last heartbeat.
	LastHeartbeat time.Time
	// MaxPartitions is its Config.MaxPartitions; Share the partitions it aims at, as
	// every node computes it from the live nodes (-1: as many as it can take).
	MaxPartitions, Share int
	// Partitions lists the partitions it holds a live lease on.
	Partitions []int
}

// Outbox returns the health of the named outbox, if it was read.
func (h Health) Outbox(name string) (OutboxHealth, bool) {
	for _, o := range h.Outboxes {
		if o.Outbox == name {
			return o, true
		}
	}
	return OutboxHealth{}, false
}

// Health reads the health of the named outboxes, or of every outbox of the instance when
// none are named. It runs three short read-only queries per outbox (one over the pending
// and dead messages, one over the partition leases, one over the live nodes) and sees every node that shares the
// tables, whether or not this instance runs. An unknown name is ErrUnknownOutbox.
//
// Counting the backlog reads the pending rows: cheap for a healthy outbox, proportional
// to the backlog for a lagging one. Call it for probes and scrapes, not in a hot loop
// (package outboxerotel caches it for its gauges).
func (o *Outboxer) Health(ctx context.Context, outboxes ...string) (Health, error) {
	if len(outboxes) == 0 {
		outboxes = o.Outboxes()
	}
	boxes := make([]*box, len(outboxes))
	for i, name := range outboxes {
		ob, err := o.outbox(name)
		if err != nil {
			return Health{}, err
		}
		boxes[i] = ob
	}
	h := Health{Outboxes: make([]OutboxHealth, 0, len(boxes))}
	for _, ob := range boxes {
		oh, at, err := o.outboxHealth(ctx, ob)
		if err != nil {
			return Health{}, fmt.Errorf("outboxer: health of %q: %w", ob.name, err)
		}
		if at.After(h.At) {
			h.At = at
		}
		h.Outboxes = append(h.Outboxes, oh)
	}
	if h.At.IsZero() {
		h.At = time.Now()
	}
	return h, nil
}

// CheckHealth reads the health of the named outboxes (every outbox when none are named)
// and checks it against limits: nil when healthy, the error of Health.Check otherwise,
// or the error that kept it from reading the health (which does not match ErrUnhealthy).
func (o *Outboxer) CheckHealth(ctx context.Context, limits HealthLimits, outboxes ...string) error {
	h, err := o.Health(ctx, outboxes...)
	if err != nil {
		return err
	}
	return h.Check(limits)
}

func (o *Outboxer) outboxHealth(ctx context.Context, ob *box) (OutboxHealth, time.Time, error) {
	parts := map[int]*PartitionHealth{}
	get := func(p int) *PartitionHealth {
		ph, ok := parts[p]
		if !ok {
			ph = &PartitionHealth{Partition: p}
			parts[p] = ph
		}
		return ph
	}
	for p := range ob.cfg.Partitions {
		get(p)
	}
	var at time.Time
	err := o.queryCommitted(ctx, healthQuery(ob.sql), []any{ob.name, ob.name}, func(scan func(...any) error) error {
		var (
			state                  int
			p                      int
			n, retrying, scheduled int64
			oldest, dbNow          dbtime.Time
		)
		if err := scan(&state, &p, &n, &retrying, &scheduled, &oldest, &dbNow); err != nil {
			return err
		}
		ph := get(p)
		at = dbNow.Time
		if State(state) == Dead {
			ph.Dead = n
			return nil
		}
		ph.Pending, ph.Retrying, ph.Scheduled = n, retrying, scheduled
		if !oldest.IsZero() {
			ph.OldestAge = max(dbNow.Sub(oldest.Time), 0)
		}
		return nil
	})
	if err != nil {
		return OutboxHealth{}, time.Time{}, err
	}
	err = o.queryCommitted(ctx, ob.sql.LeaseStatus, []any{ob.name}, func(scan func(...any) error) error {
		var (
			p       int
			owner   string
			token   int64
			expires dbtime.Time
			paused  bool
			dbNow   dbtime.Time
		)
		if err := scan(&p, &owner, &token, &expires, &paused, &dbNow); err != nil {
			return err
		}
		ph := get(p)
		ph.Owner, ph.LeaseExpires, ph.Token, ph.Paused = owner, expires.Time, token, paused
		ph.LeaseHeld = owner != "" && expires.After(dbNow.Time)
		if !ph.LeaseHeld {
			ph.LeaseExpires = time.Time{}
		}
		at = dbNow.Time
		return nil
	})
	if err != nil {
		return OutboxHealth{}, time.Time{}, err
	}
	oh := OutboxHealth{Outbox: ob.name, Owners: map[string]int{}, Unowned: []int{}, Nodes: []NodeHealth{}}
	nodes, err := o.liveNodes(ctx, ob)
	if err != nil {
		if ctx.Err() != nil {
			return OutboxHealth{}, time.Time{}, err
		}
		oh.Nodes = nil // a table migrated before nodes shared partitions: no membership to show
	}
	share := shares(ob.cfg.Partitions, nodes)
	index := map[string]int{}
	for _, n := range nodes {
		index[n.name] = len(oh.Nodes)
		oh.Nodes = append(oh.Nodes, NodeHealth{Node: n.name, Joined: n.joined, LastHeartbeat: n.lastSeen, MaxPartitions: n.max, Share: share[n.name], Partitions: []int{}})
	}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		ph := parts[p]
		oh.Pending += ph.Pending
		oh.Retrying += ph.Retrying
		oh.Scheduled += ph.Scheduled
		oh.Dead += ph.Dead
		oh.OldestAge = max(oh.OldestAge, ph.OldestAge)
		oh.Paused = oh.Paused || ph.Paused
		if ph.LeaseHeld {
			oh.Owners[ph.Owner]++
			if i, ok := index[ph.Owner]; ok {
				oh.Nodes[i].Partitions = append(oh.Nodes[i].Partitions, p)
			}
		} else if p < ob.cfg.Partitions || ph.Pending > 0 {
			// A partition beyond the configured count matters only while it holds messages.
			oh.Unowned = append(oh.Unowned, p)
		}
		oh.Partitions = append(oh.Partitions, *ph)
	}
	return oh, at, nil
}

// healthQuery reads, per partition, the pending messages (count, retrying, scheduled,
// when the oldest due one became due) and the dead ones, with the database clock. The two
// halves use the partial indexes of pending and dead rows.
func healthQuery(s *dialect.SQL) string {
	now := s.Now()
	// When a pending message became due: its creation once attempted (a retry moved
	// available_at), its available_at otherwise; NULL while it is scheduled in the future.
	dueSince := `CASE WHEN attempts > 0 THEN created_at WHEN available_at <= ` + now + ` THEN available_at END`
	q := `SELECT 0, part, COUNT(*), ` +
		`SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), ` +
		`SUM(CASE WHEN attempts = 0 AND available_at > ` + now + ` THEN 1 ELSE 0 END), ` +
		s.TimeCol(`MIN(`+dueSince+`)`) + `, ` + s.TimeCol(now) +
		` FROM ` + s.Messages + ` WHERE outbox = ? AND state IN ` + dialect.PendingStates + ` GROUP BY part` +
		` UNION ALL ` +
		`SELECT 2, part, COUNT(*), 0, 0, NULL, ` + s.TimeCol(now) +
		` FROM ` + s.Messages + ` WHERE outbox = ? AND state = 2 GROUP BY part`
	if s.Kind == dialect.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
		q = strings.Replace(q, "?", "$2", 1)
	}
	return q
}

// The problems Health.Check reports. Each error it returns matches ErrUnhealthy and one
// of these with errors.Is.
var (
	// ErrUnhealthy matches every problem Check reports.
	ErrUnhealthy = errors.New("outboxer: unhealthy")
	// ErrLagging: the oldest due message waited longer than HealthLimits.MaxAge.
	ErrLagging = errors.New("outboxer: delivery lags")
	// ErrBacklog: more messages are pending than HealthLimits.MaxPending.
	ErrBacklog = errors.New("outboxer: backlog too large")
	// ErrDeadMessages: more messages are dead than HealthLimits.MaxDead.
	ErrDeadMessages = errors.New("outboxer: dead messages")
	// ErrUnownedPartitions: partitions have no live owner, so nobody delivers them.
	ErrUnownedPartitions = errors.New("outboxer: partitions without an owner")
	// ErrPaused: the outbox is paused and HealthLimits.FailPaused is set.
	ErrPaused = errors.New("outboxer: outbox paused")
)

// HealthLimits says what Check counts as unhealthy. The zero value fails on what is
// always wrong, dead messages and partitions nobody delivers, and leaves the lag to you:
// set MaxAge, the one limit every readiness check or alert should have.
type HealthLimits struct {
	// MaxAge: an oldest due message older than this is ErrLagging. 0: not checked.
	// It applies to paused outboxes too: their messages are not going out.
	MaxAge time.Duration
	// MaxPending: a larger backlog is ErrBacklog. 0: not checked.
	MaxPending int64
	// MaxDead: more dead messages than this is ErrDeadMessages. 0 (the default): any
	// dead message; negative: not checked.
	MaxDead int64
	// AllowUnowned accepts partitions without a live owner. Leave it unset where relays
	// should run; set it on instances that publish only and check the lag alone.
	AllowUnowned bool
	// FailPaused makes a paused outbox ErrPaused. A pause is deliberate, so by default
	// it is not a failure (its lag still is, under MaxAge).
	FailPaused bool
}

// HealthError is one problem of one outbox found by Check. It matches ErrUnhealthy and
// Problem with errors.Is.
type HealthError struct {
	Outbox  string
	Problem error  // ErrLagging, ErrBacklog, ErrDeadMessages, ErrUnownedPartitions or ErrPaused
	Detail  string // the figures, e.g. "oldest due message waited 7m0s (limit 5m0s)"
}

func (e *HealthError) Error() string {
	return fmt.Sprintf("%s: outbox %q: %s", e.Problem, e.Outbox, e.Detail)
}

// Unwrap returns ErrUnhealthy and the problem.
func (e *HealthError) Unwrap() []error { return []error{ErrUnhealthy, e.Problem} }

// Check returns nil when every outbox is within limits, and otherwise every problem
// found, joined (errors.Join): each a *HealthError matching ErrUnhealthy and its problem.
//
//	if err := h.Check(core.HealthLimits{MaxAge: 5 * time.Minute}); errors.Is(err, core.ErrLagging) { ... }
func (h Health) Check(limits HealthLimits) error {
	var errs []error
	for _, o := range h.Outboxes {
		if err := o.Check(limits); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Check returns nil when the outbox is within limits, and otherwise its problems as
// Health.Check does.
func (o OutboxHealth) Check(limits HealthLimits) error {
	var errs []error
	fail := func(problem error, format string, args ...any) {
		errs = append(errs, &HealthError{Outbox: o.Outbox, Problem: problem, Detail: fmt.Sprintf(format, args...)})
	}
	if limits.MaxAge > 0 && o.OldestAge > limits.MaxAge {
		fail(ErrLagging, "the oldest due message has waited %v (limit %v)", o.OldestAge.Round(time.Millisecond), limits.MaxAge)
	}
	if limits.MaxPending > 0 && o.Pending > limits.MaxPending {
		fail(ErrBacklog, "%d messages pending (limit %d)", o.Pending, limits.MaxPending)
	}
	if limits.MaxDead >= 0 && o.Dead > limits.MaxDead {
		fail(ErrDeadMessages, "%d dead (limit %d)", o.Dead, limits.MaxDead)
	}
	if !limits.AllowUnowned && len(o.Unowned) > 0 {
		ps := make([]string, len(o.Unowned))
		for i, p := range o.Unowned {
			ps[i] = strconv.Itoa(p)
		}
		fail(ErrUnownedPartitions, "no live owner for partition %s", strings.Join(ps, ", "))
	}
	if limits.FailPaused && o.Paused {
		fail(ErrPaused, "paused")
	}
	return errors.Join(errs...)
}
