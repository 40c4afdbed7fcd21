package outboxerotel

import (
	"context"
	"maps"

	"github.com/outboxer-go/outboxer/core"
)

// Combine returns hooks that call, for each event, the hooks given that handle it, in the
// order given. An event none of them handles stays nil in the result, so the engine
// skips it at no cost. For OnPublishContext, the headers the hooks return are merged (a
// later hook's value wins for a name two of them set) and their done funcs are called
// in the reverse order. For OnBatchContext, each hook gets the context the one before
// returned.
func Combine(hooks ...core.Hooks) core.Hooks {
	return core.Hooks{
		OnPublish:        chain(hooks, func(h core.Hooks) func(core.PublishEvent) { return h.OnPublish }),
		OnBatchStart:     chain(hooks, func(h core.Hooks) func(core.BatchEvent) { return h.OnBatchStart }),
		OnBatchStop:      chain(hooks, func(h core.Hooks) func(core.BatchEvent) { return h.OnBatchStop }),
		OnBatchException: chain(hooks, func(h core.Hooks) func(core.BatchEvent) { return h.OnBatchException }),
		OnRetry:          chain(hooks, func(h core.Hooks) func(core.MessageEvent) { return h.OnRetry }),
		OnDead:           chain(hooks, func(h core.Hooks) func(core.MessageEvent) { return h.OnDead }),
		OnPrune:          chain(hooks, func(h core.Hooks) func(core.PruneEvent) { return h.OnPrune }),
		OnPublishContext: chainContext(hooks),
		OnBatchContext:   chainBatchContext(hooks),
	}
}

type batchContextHook = func(context.Context, core.BatchEvent) context.Context

// chainBatchContext combines the OnBatchContext hooks: each gets the context the one
// before it returned (a nil result keeps the context it was given).
func chainBatchContext(hooks []core.Hooks) batchContextHook {
	var fs []batchContextHook
	for _, h := range hooks {
		if h.OnBatchContext != nil {
			fs = append(fs, h.OnBatchContext)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(ctx context.Context, ev core.BatchEvent) context.Context {
		for _, f := range fs {
			if c := f(ctx, ev); c != nil {
				ctx = c
			}
		}
		return ctx
	}
}

type publishContextHook = func(context.Context, core.PublishEvent) (map[string]string, func([]core.Envelope, error))

// chainContext combines the OnPublishContext hooks as Combine says.
func chainContext(hooks []core.Hooks) publishContextHook {
	var fs []publishContextHook
	for _, h := range hooks {
		if h.OnPublishContext != nil {
			fs = append(fs, h.OnPublishContext)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(ctx context.Context, ev core.PublishEvent) (map[string]string, func([]core.Envelope, error)) {
		var headers map[string]string
		var dones []func([]core.Envelope, error)
		for _, f := range fs {
			h, done := f(ctx, ev)
			if len(h) > 0 {
				if headers == nil {
					headers = make(map[string]string, len(h))
				}
				maps.Copy(headers, h)
			}
			if done != nil {
				dones = append(dones, done)
			}
		}
		if len(dones) == 0 {
			return headers, nil
		}
		return headers, func(envs []core.Envelope, err error) {
			for i := len(dones) - 1; i >= 0; i-- {
				dones[i](envs, err)
			}
		}
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
