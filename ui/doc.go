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
// and is refused from another origin; the cookie is Secure on requests over TLS, and on
// every request with Config.SecureCookie (set it behind a proxy that terminates TLS). In
// read-only mode the pages show no actions and the server refuses every POST with 403,
// whatever it carries.
//
// # Cost
//
// Every page reads a bounded part of the indexes the migration creates, so it costs about
// the same on a backlog of a thousand messages or of millions. Lists use keyset
// pagination (by message ID, never OFFSET). The overview and an outbox's page do not call
// core.Outboxer.Health, which reads every pending row: in three statements per outbox,
// they count pending, dead and recently delivered messages on their indexes up to 10000
// (without reading the rows; on an outbox's page, 10000 shared among its partitions),
// read the retrying and scheduled messages from 1000 waiting or held rows at most, the
// blocked groups from 1000 rows, and the dead of each partition only when there are at
// most 1000. A figure above its bound is shown as a lower bound, "10000+", and the page
// says so. The age of the oldest due message comes from index probes: the first 100
// ready messages of each partition (by ID, the order the relay delivers them), the first
// waiting message when it is past due, and the waiting and held messages read (a failed
// one counts from its publication, as Health counts it). It is Health's OldestAge when
// every ready and waiting message of the outbox was read; otherwise it is shown as a
// lower bound, "5m+" (a message retried or scheduled, due later than those after it, can
// head a partition's line, so the first messages alone cannot tell the oldest).
// Leases and pause states are read in full (a row per partition). Bulk actions over a
// filter work in batches of BatchSize and change only the messages the confirmation page
// counted, those of them the filter still selects (over more than 10000 messages: none
// newer than the newest counted).
package outboxerui
