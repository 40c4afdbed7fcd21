// Package entdb is ent's generated code for the schema in ./schema, with the
// sql/execquery feature (ExecContext and QueryContext on the client and transactions),
// which the adapter publishes through. Regenerate with go generate.
package entdb

//go:generate go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
