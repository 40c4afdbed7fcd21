package pgxoutbox

import "embed"

// Migrations holds the DDL of the default outbox table as plain SQL files for
// golang-migrate, goose (with its annotations added) or a hand-run script:
// migrations/postgres/000001_outboxer.up.sql and .down.sql. They are
// core.MigrationSQL's text, checked by this module's tests, so they never drift from
// core.Migrate.
//
//go:embed migrations
var Migrations embed.FS
