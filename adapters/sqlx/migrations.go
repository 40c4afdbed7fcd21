package sqlxoutbox

import "embed"

// Migrations holds the DDL of the default outbox table as plain SQL files, one directory
// per dialect (postgres, mysql, sqlite), named for golang-migrate:
// 000001_outboxer.up.sql and 000001_outboxer.down.sql. They are core.MigrationSQL's
// text, checked by this module's tests, so they never drift from core.Migrate.
//
//go:embed migrations
var Migrations embed.FS
