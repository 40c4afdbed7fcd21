// Package ent is the example's generated ent code, with the sql/execquery feature the
// Outboxer adapter publishes through. Regenerate with go generate.
package ent

//go:generate go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
