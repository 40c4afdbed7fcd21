package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Run delivers the outboxes until ctx is done, then stops gracefully: it stops fetching,
// lets in-flight batches finish within Config.ShutdownTimeout, releases the partitions
// so other nodes take them at once, closes the relays that are Closers, and returns nil.
//
// It first checks that the partition count recorded in the database matches the
// configuration (ErrRepartitioned otherwise; see Config.AllowRepartition for when it may
// change), creates missing lease rows and starts the relays that are Starters. A
// PublishOnly or Manual instance starts nothing: Run then just waits for ctx.
//
// Start-up failures that waiting can fix are retried, with an Error log line naming the
// error and the next try each time, until start-up succeeds or ctx is done: the database
// unreachable or refusing connections, the tables missing (ErrNotMigrated: a migration job
// that has not run yet), a Starter's error. The delay between tries grows from 100 ms to
// 30 s. Run returns at once, having logged it at Error, only what waiting cannot fix:
// ErrRepartitioned, ErrShapeMismatch, a *ConfigError (ErrInvalidConfig), an error marked
// with Permanent (a Starter may return one), and ErrAlreadyRunning. When ctx is done before start-up
// succeeded, Run returns an error matching ctx's error (context.Canceled or
// context.DeadlineExceeded with errors.Is) that also wraps the last start-up failure, so
// that a service can tell "stopped" (nil) from "never delivered" (an error).
//
// A relay whose Start succeeded is not started again when a later try fails: each
// Starter's Start succeeds once per Run. When start-up fails for good, Run closes the
// relays it started (and only those) before returning.
//
// Run may be called once per instance; it returns ErrAlreadyRunning after that. A Run
// that failed while starting (before any worker ran) does not count: Run may be called
// again.
func (o *Outboxer) Run(ctx context.Context) error {
	if !o.running.CompareAndSwap(false, true) {
		o.cfg.Logger.Error("outboxer: Run called twice", "outboxer", o.cfg.Name, "err", ErrAlreadyRunning)
		return ErrAlreadyRunning
	}
	if o.cfg.PublishOnly || o.cfg.Manual {
		<-ctx.Done()
		return nil
	}
	started := map[Relay]bool{}
	if err := o.startUp(ctx, started); err != nil {
		// The relays that did start are closed before the flag is cleared, so that a
		// second Run cannot overlap with the close; the others are left as they were.
		o.closeRelays(started)
		o.running.Store(false)
		return err
	}
	defer o.closeRelays(nil)

	// stop ends fetching; hard, ShutdownTimeout later, cancels what is still in flight.
	stop := ctx
	hard, cancelHard := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHard(nil)
	go func() {
		<-stop.Done()
		t := time.NewTimer(o.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelHard(errShutdown)
		case <-hard.Done():
		}
	}()

	var wg sync.WaitGroup
	owner := o.owner
	for _, name := range o.Outboxes() {
		ob := o.outboxes[name]
		ob.mu.Lock()
		ob.workers = nil
		for p := range ob.cfg.Partitions {
			w := newWorker(o, ob, p, owner)
			w.bal = ob.bal
			ob.workers = append(ob.workers, w)
			wg.Go(func() { w.loop(stop, hard) })
		}
		ob.mu.Unlock()
	}
	// The membership runs on until the workers have given their partitions back.
	members, endMembers := context.WithCancel(context.WithoutCancel(ctx))
	var mwg sync.WaitGroup
	mwg.Go(func() { o.members(members, stop) })
	defer func() {
		endMembers()
		mwg.Wait()
	}()
	if o.cfg.Notify {
		wg.Go(func() { o.listen(stop) })
	}
	if o.needsPruner() {
		wg.Go(func() { o.prune(stop) })
	}
	wg.Go(func() { o.sweep(stop) }) // messages published beyond the partition count
	wg.Go(func() { o.watchPool(stop) })
	if o.cfg.Dialect == Postgres && o.cfg.VacuumInterval >= 0 {
		every := o.vacuumInterval(ctx)
		wg.Go(func() { o.vacuum(stop, every) })
	}
	o.cfg.Logger.Info("outboxer: running", "outboxer", o.cfg.Name, "outboxes", len(o.outboxes), "owner", owner)
	wg.Wait()
	endMembers()
	mwg.Wait()
	o.cfg.Logger.Info("outboxer: stopped", "outboxer", o.cfg.Name)
	return nil
}

// prepareRun checks the partitions of every outbox and creates missing lease rows.
func (o *Outboxer) prepareRun(ctx context.Context) error {
	for _, name := range o.Outboxes() {
		ob := o.outboxes[name]
		if err := o.checkPartitions(ctx, ob); err != nil {
			return startUpError(ob, err)
		}
		if err := o.ensureLeases(ctx, ob, ob.cfg.Paused, true); err != nil {
			return startUpError(ob, err)
		}
		if ob.cfg.Paused {
			if err := o.Pause(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// startRelays starts every distinct relay that is a Starter, in outbox order.
// It skips the relays in started, and adds those it starts.
func (o *Outboxer) startRelays(ctx context.Context, started map[Relay]bool) error {
	for _, name := range o.Outboxes() {
		r := o.outboxes[name].cfg.Relay
		if s, ok := r.(Starter); ok && !started[r] {
			if err := s.Start(ctx); err != nil {
				return fmt.Errorf("outboxer: start relay of %q: %w", name, err)
			}
			started[r] = true
		}
	}
	return nil
}

// closeRelays closes every distinct relay that is a Closer (started or not), or, when
// only is not nil, those of them in only.
func (o *Outboxer) closeRelays(only map[Relay]bool) {
	seen := map[Relay]bool{}
	for _, name := range o.Outboxes() {
		r := o.outboxes[name].cfg.Relay
		if c, ok := r.(Closer); ok && !seen[r] && (only == nil || only[r]) {
			seen[r] = true
			if err := c.Close(); err != nil {
				o.cfg.Logger.Warn("outboxer: close relay", "outbox", name, "err", err)
			}
		}
	}
}

// loop runs a worker until stop is done.
func (w *worker) loop(stop, hard context.Context) {
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stop), 5*time.Second)
		defer cancel()
		w.release(ctx)
		w.settle()
	}()
	wake := w.ob.wake[w.part]
	failures := 0
	offered := false         // the membership loop offered the partition (see offerFree)
	var soon []time.Duration // re-checks after a publish in a transaction that may not have committed yet
	for stop.Err() == nil {
		w.settle()
		if !w.held {
			if !w.take(stop, offered) {
				// The node has its share, someone else has the partition, or the
				// database is away: look again later, or when the partition is offered.
				var ok bool
				if offered, ok = w.await(stop, wake); !ok {
					return
				}
				continue
			}
			offered = false
			failures, soon = 0, nil
		}
		if w.bal != nil && w.bal.surplus() {
			// The node holds more than its share: the batch in flight is confirmed; give
			// the partition back, and tell the other nodes.
			w.counted = false
			ctx, cancel := context.WithTimeout(context.WithoutCancel(stop), 5*time.Second)
			w.release(ctx)
			w.o.announce(ctx, w.ob)
			cancel()
			w.log.Info("outboxer: partition given back to balance the nodes")
			continue
		}
		n, err := w.step(stop, hard)
		switch {
		case errors.Is(err, ErrLeaseLost):
			continue
		case err != nil:
			if stop.Err() != nil {
				return
			}
			failures++
			wait := min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)
			w.log.Warn("outboxer: batch failed", "err", err, "retry_in", wait)
			if !sleep(stop, wait) {
				return
			}
			continue
		}
		failures = 0
		if n >= w.ob.cfg.BatchSize {
			continue // a full batch: more is likely waiting
		}
		if n > 0 {
			soon = nil
			continue // something came; look once more before sleeping
		}
		wait := w.ob.cfg.PollInterval
		if len(soon) > 0 {
			wait, soon = soon[0], soon[1:]
		}
		if until, err := w.nextDue(stop); err == nil && until > 0 && until < wait {
			wait = until
		}
		k, ok := w.idle(stop, wake, wait)
		if !ok {
			return
		}
		switch k {
		case wakeSoon:
			soon = []time.Duration{time.Millisecond, 4 * time.Millisecond, 16 * time.Millisecond, 64 * time.Millisecond}
		case wakeRecheck:
			w.renewedAt = time.Time{} // read the paused flag now
		}
	}
}

// settle stops counting the partition in the node's share once the worker no longer
// holds it (lost, or released).
func (w *worker) settle() {
	if w.counted && !w.held {
		w.counted = false
		w.bal.unclaim()
	}
}

// take tries to take the partition, within the node's share (offered: the membership loop
// offered it). It reports whether the worker holds it.
func (w *worker) take(stop context.Context, offered bool) bool {
	if w.bal != nil {
		if !w.bal.claim(offered) {
			return false
		}
	}
	ok, err := w.acquire(stop)
	if err != nil && stop.Err() == nil {
		w.log.Warn("outboxer: cannot take partition", "err", err)
	}
	if w.bal != nil {
		w.bal.took(ok)
		w.counted = ok
	}
	return ok
}

// await waits before a worker that holds nothing looks again: a quarter lease, or until
// the membership loop offers it the partition (free while the node is below its share;
// see offerFree). It reports whether the partition was offered, and false as its second
// result when stop is done.
func (w *worker) await(stop context.Context, wake <-chan wakeKind) (offered, ok bool) {
	t := time.NewTimer(w.lease() / 4)
	defer t.Stop()
	for {
		select {
		case <-stop.Done():
			return false, false
		case k := <-wake:
			if k == wakeTake {
				return true, true
			}
			// A wake-up for the holder of the partition: not this worker's business.
		case <-t.C:
			return false, true
		}
	}
}

// idle waits for wait or a wake-up, whichever comes first, renewing the lease whenever
// it is due meanwhile: a PollInterval longer than the lease does not let it lapse. It
// returns the wake-up (0 for none) and false when stop is done.
func (w *worker) idle(stop context.Context, wake <-chan wakeKind, wait time.Duration) (wakeKind, bool) {
	end := time.Now().Add(wait)
	for {
		d := time.Until(end)
		renewing := false
		if w.held {
			if r := w.lease()/4 - time.Since(w.renewedAt); r < d {
				d, renewing = max(r, 0), true
			}
		}
		t := time.NewTimer(d)
		select {
		case <-stop.Done():
			t.Stop()
			return 0, false
		case k := <-wake:
			t.Stop()
			return k, true
		case <-t.C:
		}
		if !renewing {
			return 0, true
		}
		if err := w.renew(stop); err != nil {
			if stop.Err() != nil {
				return 0, false
			}
			if !errors.Is(err, ErrLeaseLost) {
				w.log.Warn("outboxer: renew lease while idle", "err", err)
			}
			return 0, true // the loop takes it from there
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (o *Outboxer) needsPruner() bool {
	for _, ob := range o.outboxes {
		if ob.cfg.Retention.keep > 0 {
			return true
		}
	}
	return false
}

// prune removes delivered messages past their retention every PruneInterval.
func (o *Outboxer) prune(ctx context.Context) {
	for {
		if !sleep(ctx, o.cfg.PruneInterval) {
			return
		}
		for _, name := range o.Outboxes() {
			if _, err := o.PruneNow(ctx, name); err != nil && ctx.Err() == nil {
				o.cfg.Logger.Warn("outboxer: prune", "outbox", name, "err", err)
			}
		}
	}
}

// PruneNow removes the delivered messages of an outbox that are past their retention
// and returns how many. Run does it every Config.PruneInterval; it does nothing for an
// outbox with retention Delete.
func (o *Outboxer) PruneNow(ctx context.Context, outbox string) (int64, error) {
	ob, err := o.outbox(outbox)
	if err != nil {
		return 0, err
	}
	keep := ob.cfg.Retention.keep
	if keep <= 0 {
		return 0, nil
	}
	var total int64
	for {
		var n int64
		if err := o.committed(ctx, func(db handle) error {
			res, err := db.ExecContext(ctx, ob.sql.Prune, outbox, -keep.Microseconds())
			if err == nil {
				n, _ = res.RowsAffected()
			}
			return err
		}); err != nil {
			return total, fmt.Errorf("outboxer: prune %q: %w", outbox, err)
		}
		total += n
		if n < 5000 {
			break
		}
	}
	if total > 0 && o.cfg.Hooks.OnPrune != nil {
		o.cfg.Hooks.OnPrune(PruneEvent{Name: o.cfg.Name, Outbox: outbox, Count: int(total)})
	}
	return total, nil
}

// vacuumInterval decides how often Run vacuums the message tables on PostgreSQL besides
// the vacuums after set-asides (0: never).
func (o *Outboxer) vacuumInterval(ctx context.Context) time.Duration {
	if o.cfg.VacuumInterval > 0 {
		return o.cfg.VacuumInterval
	}
	var on string
	if err := o.cfg.DB.QueryRowContext(ctx, `SHOW autovacuum`).Scan(&on); err != nil || on != "off" {
		return 0
	}
	o.cfg.Logger.Warn("outboxer: the server's autovacuum is off; Run vacuums the outbox tables every 30s (set VacuumInterval to change it)")
	return 30 * time.Second
}

// Vacuums after set-asides (PostgreSQL). Setting a row aside (holding it behind its
// group's waiting head) moves it out of the index of ready rows, and the entry it leaves
// there is garbage every fetch of the partition steps over until a VACUUM removes it:
// 100,000 rows set aside made each ready message wait 3.8 times as long. Autovacuum comes
// within a minute or so; Run vacuums the table once vacuumAfterSetAside rows were set
// aside and the workers have stopped setting rows aside for vacuumQuiet (or, while they go
// on, every vacuumAtMost).
const (
	vacuumAfterSetAside = 1000
	vacuumQuiet         = 500 * time.Millisecond
	vacuumAtMost        = 10 * time.Second
)

// vacuum vacuums the message tables every interval (if not 0), and those where many rows
// were set aside when the set-aside is over: the first to reclaim the space of delivered
// (deleted) messages when nothing else does, the second to keep fetches from stepping
// over the index entries set-aside rows left.
func (o *Outboxer) vacuum(ctx context.Context, every time.Duration) {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	run := func(table string) {
		if _, err := o.cfg.DB.ExecContext(ctx, `VACUUM `+table); err != nil && ctx.Err() == nil {
			o.cfg.Logger.Warn("outboxer: vacuum", "table", table, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			for _, s := range o.tables {
				run(s.Messages)
			}
		case <-o.vacuumSoon:
			// Wait for the set-aside to end: one vacuum after it, not one per batch.
			total := func() (n int64) {
				for _, ob := range o.outboxes {
					n += ob.setAside.Load()
				}
				return n
			}
			last, since := total(), time.Now()
			for sleep(ctx, vacuumQuiet) {
				n := total()
				if n == last || time.Since(since) >= vacuumAtMost {
					break
				}
				last = n
			}
			if ctx.Err() != nil {
				return
			}
			tables := map[string]int64{}
			for _, ob := range o.outboxes {
				if n := ob.setAside.Load(); n >= vacuumAfterSetAside {
					ob.setAside.Add(-n)
					tables[ob.sql.Messages] += n
				}
			}
			for table, n := range tables {
				start := time.Now()
				run(table)
				o.cfg.Logger.Debug("outboxer: vacuumed after a set-aside", "outboxer", o.cfg.Name, "table", table, "set_aside", n, "took", time.Since(start))
			}
		}
	}
}

// poolCheckEvery is how often Run reads the pool's statistics, and poolChurn how many
// connections closed on their return within it make it warn.
const (
	poolCheckEvery = 5 * time.Second
	poolChurn      = 10
)

// watchPool warns, once, when the pool closes connections as soon as they are given back
// because it may keep only a few idle: database/sql keeps 2 unless SetMaxIdleConns says
// otherwise, and a node's workers (one per partition) use more at once, so a statement may
// have to open a connection first (on PostgreSQL, a server process: with 12 partitions a
// graceful stop took 0.5 s instead of 35 ms).
func (o *Outboxer) watchPool(stop context.Context) {
	last := o.cfg.DB.Stats().MaxIdleClosed
	for sleep(stop, poolCheckEvery) {
		closed := o.cfg.DB.Stats().MaxIdleClosed
		if closed-last >= poolChurn {
			workers := 0
			for _, ob := range o.outboxes {
				workers += ob.cfg.Partitions
			}
			o.cfg.Logger.Warn("outboxer: the database pool closes connections as soon as they are given back, so statements wait for new ones; "+
				"keep enough idle (Config.DB.SetMaxIdleConns) for the relay's workers and yours",
				"outboxer", o.cfg.Name, "closed", closed-last, "within", poolCheckEvery, "workers", workers, "suggested_max_idle", workers+4)
			return
		}
		last = closed
	}
}
