package outboxerotel

import "github.com/outboxer-go/outboxer/core"

// Combine returns hooks that call, for each event, the hooks given that handle it, in the
// order given. An event none of them handles stays nil in the result, so the engine
// skips it at no cost.
func Combine(hooks ...core.Hooks) core.Hooks {
	return core.Hooks{
		OnPublish:        chain(hooks, func(h core.Hooks) func(core.PublishEvent) { return h.OnPublish }),
		OnBatchStart:     chain(hooks, func(h core.Hooks) func(core.BatchEvent) { return h.OnBatchStart }),
		OnBatchStop:      chain(hooks, func(h core.Hooks) func(core.BatchEvent) { return h.OnBatchStop }),
		OnBatchException: chain(hooks, func(h core.Hooks) func(core.BatchEvent) { return h.OnBatchException }),
		OnRetry:          chain(hooks, func(h core.Hooks) func(core.MessageEvent) { return h.OnRetry }),
		OnDead:           chain(hooks, func(h core.Hooks) func(core.MessageEvent) { return h.OnDead }),
		OnPrune:          chain(hooks, func(h core.Hooks) func(core.PruneEvent) { return h.OnPrune }),
	}
}

// chain collects the non-nil handlers field picks out of hooks into one.
func chain[E any](hooks []core.Hooks, field func(core.Hooks) func(E)) func(E) {
	var fs []func(E)
	for _, h := range hooks {
		if f := field(h); f != nil {
			fs = append(fs, f)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(ev E) {
		for _, f := range fs {
			f(ev)
		}
	}
}
