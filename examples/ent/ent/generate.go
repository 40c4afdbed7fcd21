// Package ent is the ent code generated for the schema in ./schema, with the
// sql/execquery feature (ExecContext and QueryContext on the client and transactions),
// which the Outboxer ent adapter publishes through.
//
// The ent example (examples/ent) and the ent adapter's tests (adapters/ent/test) both use
// it. It is a module of its own, never published, so that the generated code stands once
// in the repository and only those two reach it: the published adapter module does not
// contain it. Regenerate with go generate, in this directory; the ent command is a tool
// of this module (go.mod's tool line).
package ent

//go:generate go tool ent generate --feature sql/execquery ./schema
