package core

import (
	"context"
	"slices"
)

// publishContext runs a PublishAll call inside Hooks.OnPublishContext: the hook sees the
// call before anything is checked or written, its headers go into every message (under
// the message's own), and done learns the result.
func (o *Outboxer) publishContext(ctx context.Context,
	hook func(context.Context, PublishEvent) (map[string]string, func([]Envelope, error)),
	db Executor, msgs []Message, opts []PublishOption) ([]Envelope, error) {
	var po publishOptions
	for _, opt := range opts {
		opt(&po)
	}
	ev := PublishEvent{Name: o.cfg.Name, Count: len(msgs)}
	for _, m := range msgs {
		name := po.outbox
		if name == "" && !isNil(m) {
			name = m.Outbox()
		}
		if name != "" && !slices.Contains(ev.Outboxes, name) {
			ev.Outboxes = append(ev.Outboxes, name)
		}
	}
	headers, done := hook(ctx, ev)
	if len(headers) > 0 {
		opts = append(slices.Clip(opts), func(po *publishOptions) { po.ctxHeaders = headers })
	}
	envs, err := o.publishAll(ctx, db, msgs, opts...)
	if done != nil {
		done(envs, err)
	}
	return envs, err
}
