// Package outboxerui is a web dashboard for outbox tables: an http.Handler that shows
// each outbox's backlog, lag, partitions, owners and stuck groups, lists and filters its
// messages, shows one message in full, and retries, discards, pauses and resumes, each
// change after a confirmation page that names what it will change.
//
// # Embedding
//
// New returns a handler over one or more databases (Config.Instances). It keeps no
// global state and builds every link relative to the page, so it can be mounted under
// any prefix with http.StripPrefix, behind the host application's own authentication:
//
//	ui, err := outboxerui.New(outboxerui.Config{
//		Instances: []outboxerui.Instance{{Name: "main", DB: db}},
//	})
//	mux.Handle("/admin/outbox/", requireAdmin(http.StripPrefix("/admin/outbox", ui)))
//
// The handler does not authenticate anybody: whoever reaches it can act on the outboxes
// unless Config.ReadOnly is set. The outboxer command serves it standalone
// (outboxer ui), with optional basic authentication.
//
// # Safety
//
// Pages are server-rendered with html/template: payloads, headers, group keys and errors
// are escaped. Filters are query parameters, never SQL text. Responses carry a
// Content-Security-Policy that allows no inline script and nothing from other origins;
// the stylesheet and the one small script (auto-refresh) are embedded in the binary, and
// every page works without JavaScript. Every POST carries a CSRF token tied to a cookie
// and is refused from another origin. In read-only mode the pages show no actions and
// the server refuses every POST with 403, whatever it carries.
//
// # Cost
//
// Lists use keyset pagination (by message ID, never OFFSET) over the indexes the
// migration creates. The overview counts each outbox's backlog (core.Outboxer.Health):
// proportional to the backlog, so the page refreshes every RefreshInterval, not faster.
// Bulk actions over a filter work in batches of BatchSize and change only the messages
// the confirmation page counted, those of them the filter still selects (over more than
// 10000 messages: none newer than the newest counted).
package outboxerui
