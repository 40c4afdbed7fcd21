package core

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// Outboxer is an instance: it publishes into its outboxes and, when Run, delivers them.
// Create it with New. Its methods are safe for concurrent use; several instances may live
// in one process.
type Outboxer struct {
	cfg      Config
	kind     dialect.Kind
	outboxes map[string]*box
	tables   map[string]*dialect.SQL // by table name
	running  atomic.Bool
	listener atomic.Pointer[NotifyStatus] // the Notify listener's state, while it runs
	// isolation caches what strictIsolation found.
	isolation atomic.Int32
	packet    atomic.Int64  // MySQL: the server's max_allowed_packet, once read
	rr        atomic.Uint64 // spreads unordered messages over partitions
	// owner names this instance in the lease and node tables (Owner).
	owner string
	// refresh asks the membership loop to heartbeat and read the nodes now.
	refresh chan struct{}
	// vacuumSoon (PostgreSQL) asks Run's vacuum loop to vacuum the tables where workers
	// set many rows aside (see box.setAside).
	vacuumSoon chan struct{}
}

// box is one configured outbox with its statements and its workers' wake-up channels.
type box struct {
	name string
	cfg  OutboxConfig
	sql  *dialect.SQL
	// wake has one channel per partition, buffered 1: a send never blocks and a pending
	// wake-up is never lost.
	wake []chan wakeKind
	// pauses counts the Pause and Resume calls of this instance: a worker that sees it
	// change reads the paused flag before its next batch, busy or not.
	pauses atomic.Uint64
	// placed is the partition count publishes place messages among (see partitionsFor).
	placed atomic.Pointer[placement]
	// mu guards workers, set while Run runs, so admin calls can reach them.
	mu      sync.Mutex
	workers []*worker
	// bal is this node's share of the partitions while Run runs.
	bal *balance
	// setAside counts the rows this instance's workers held since the table was last
	// vacuumed (PostgreSQL).
	setAside atomic.Int64
}

type wakeKind uint8

const (
	wakeNow     wakeKind = iota + 1 // rows were committed: fetch now
	wakeSoon                        // rows were written in a transaction that may commit soon
	wakeRecheck                     // messages or the pause changed (discard, retry, pause): read the lease now
	wakeTake                        // the partition is free and the node is below its share: take it now
)

// New checks cfg, applies the defaults and returns an instance. It returns a *ConfigError
// (errors.Is ErrInvalidConfig) naming the first option it refuses. New does no I/O.
func New(cfg Config) (*Outboxer, error) {
	if cfg.DB != nil && cfg.Dialect == "" {
		d, err := DetectDialect(cfg.DB)
		if err != nil {
			return nil, &ConfigError{Field: "Dialect", Reason: err.Error()}
		}
		cfg.Dialect = d
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	o := &Outboxer{
		cfg:        c,
		kind:       dialectKind(c.Dialect),
		outboxes:   make(map[string]*box, len(c.Outboxes)),
		tables:     map[string]*dialect.SQL{},
		owner:      newOwner(c.Name),
		refresh:    make(chan struct{}, 1),
		vacuumSoon: make(chan struct{}, 1),
	}
	for _, name := range slices.Sorted(maps.Keys(c.Outboxes)) {
		oc := c.Outboxes[name]
		s, ok := o.tables[oc.Table]
		if !ok {
			s = dialect.New(o.kind, c.Schema, oc.Table)
			o.tables[oc.Table] = s
		}
		ob := &box{name: name, cfg: oc, sql: s, wake: make([]chan wakeKind, oc.Partitions), bal: newBalance()}
		for i := range ob.wake {
			ob.wake[i] = make(chan wakeKind, 1)
		}
		o.outboxes[name] = ob
	}
	return o, nil
}

// Config returns the configuration in force, with the defaults applied.
func (o *Outboxer) Config() Config { return o.cfg }

// Outboxes returns the names of the configured outboxes, sorted.
func (o *Outboxer) Outboxes() []string { return slices.Sorted(maps.Keys(o.outboxes)) }

func (o *Outboxer) outbox(name string) (*box, error) {
	ob, ok := o.outboxes[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (configured: %s)", ErrUnknownOutbox, name, strings.Join(o.Outboxes(), ", "))
	}
	return ob, nil
}

// Wake tells the workers of this instance that the given envelopes were committed, so
// they deliver them now instead of at the next poll. Publish does it by itself for
// handles that are not transactions; the run-in-transaction helpers do it after commit.
// Call it after committing a transaction you published in, if you want the lowest latency
// without Notify.
func (o *Outboxer) Wake(envs ...Envelope) {
	for _, e := range envs {
		if ob, ok := o.outboxes[e.Outbox]; ok && e.Partition >= 0 && e.Partition < len(ob.wake) {
			ob.signal(e.Partition, wakeNow)
		}
	}
}

func (ob *box) signal(part int, k wakeKind) {
	select {
	case ob.wake[part] <- k:
	default:
		// A wake-up is already pending. Upgrade a soft one to a firm one.
		if k == wakeNow {
			select {
			case old := <-ob.wake[part]:
				if old > k {
					k = old
				}
			default:
			}
			select {
			case ob.wake[part] <- k:
			default:
			}
		}
	}
}

// offer wakes the worker of a free partition so that it tries to take it, whatever
// wake-up was pending (one for a held partition is moot: the worker holds none).
func (ob *box) offer(part int) {
	for {
		select {
		case ob.wake[part] <- wakeTake:
			return
		default:
		}
		select {
		case <-ob.wake[part]:
		default:
		}
	}
}

func (ob *box) signalAll(k wakeKind) {
	for p := range ob.wake {
		ob.signal(p, k)
	}
}

func dialectKind(d Dialect) dialect.Kind {
	switch d {
	case SQLite:
		return dialect.SQLite
	case MySQL:
		return dialect.MySQL
	}
	return dialect.Postgres
}
