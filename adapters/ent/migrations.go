package entoutbox

import "embed"

// Migrations holds the outbox tables as an Atlas versioned migration directory per
// dialect (migrations/postgres, migrations/mysql, migrations/sqlite): one file,
// 20250101000000_outboxer.sql, with core.MigrationSQL's DDL for the default table, and
// the directory's atlas.sum. Copy the file into the migration directory ent and Atlas
// manage for your schema (then run atlas migrate hash), so the outbox is created with
// your entities. A test keeps the files equal to the core's DDL.
//
//go:embed migrations
var Migrations embed.FS
