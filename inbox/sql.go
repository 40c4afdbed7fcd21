package inbox

import (
	"strconv"
	"strings"

	"github.com/outboxer-go/outboxer/core"
)

// statements holds the inbox's SQL in one dialect, with the dialect's placeholders.
type statements struct {
	dialect core.Dialect
	records string // quoted, qualified names
	groups  string

	claim, claimGroup, raiseGroup, pruneRecords, pruneGroups string
	up, down                                                 []string
}

func newStatements(d core.Dialect, schema, table string) *statements {
	quote := func(name string) string {
		if d == core.MySQL {
			return "`" + name + "`"
		}
		return `"` + name + `"`
	}
	qualified := func(name string) string {
		if schema != "" {
			return quote(schema) + "." + quote(name)
		}
		return quote(name)
	}
	s := &statements{dialect: d, records: qualified(table), groups: qualified(table + "_groups")}

	now, minus := `now()`, `(now() - ? * interval '1 microsecond')`
	insertIgnore := func(table, cols, values string) string {
		return `INSERT INTO ` + table + ` (` + cols + `) VALUES (` + values + `) ON CONFLICT DO NOTHING`
	}
	switch d {
	case core.SQLite:
		now = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`
		minus = `(` + now + ` - ?)`
	case core.MySQL:
		now, minus = `UTC_TIMESTAMP(6)`, `(UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)`
		insertIgnore = func(table, cols, values string) string {
			return `INSERT IGNORE INTO ` + table + ` (` + cols + `) VALUES (` + values + `)`
		}
	}
	p := func(q string) string { return placeholders(d, q) }
	s.claim = p(insertIgnore(s.records, `consumer, msg_key, received_at`, `?, ?, `+now))
	s.claimGroup = p(insertIgnore(s.groups, `consumer, group_key, seq, updated_at`, `?, ?, ?, `+now))
	s.raiseGroup = p(`UPDATE ` + s.groups + ` SET seq = ?, updated_at = ` + now + ` WHERE consumer = ? AND group_key = ? AND seq < ?`)
	s.pruneRecords = p(`DELETE FROM ` + s.records + ` WHERE received_at < ` + minus)
	s.pruneGroups = p(`DELETE FROM ` + s.groups + ` WHERE updated_at < ` + minus)

	idx := quote(table + "_received_at")
	gidx := quote(table + "_groups_updated_at")
	switch d {
	case core.Postgres:
		if schema != "" {
			s.up = append(s.up, `CREATE SCHEMA IF NOT EXISTS `+quote(schema))
		}
		s.up = append(s.up,
			`CREATE TABLE IF NOT EXISTS `+s.records+` (
	consumer text NOT NULL,
	msg_key text NOT NULL,
	received_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, msg_key)
)`,
			`CREATE INDEX IF NOT EXISTS `+idx+` ON `+s.records+` (received_at)`,
			`CREATE TABLE IF NOT EXISTS `+s.groups+` (
	consumer text NOT NULL,
	group_key text NOT NULL,
	seq bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, group_key)
)`,
			`CREATE INDEX IF NOT EXISTS `+gidx+` ON `+s.groups+` (updated_at)`)
	case core.SQLite:
		s.up = append(s.up,
			`CREATE TABLE IF NOT EXISTS `+s.records+` (
	consumer TEXT NOT NULL,
	msg_key TEXT NOT NULL,
	received_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, msg_key)
) WITHOUT ROWID`,
			`CREATE INDEX IF NOT EXISTS `+idx+` ON `+s.records+` (received_at)`,
			`CREATE TABLE IF NOT EXISTS `+s.groups+` (
	consumer TEXT NOT NULL,
	group_key TEXT NOT NULL,
	seq INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, group_key)
) WITHOUT ROWID`,
			`CREATE INDEX IF NOT EXISTS `+gidx+` ON `+s.groups+` (updated_at)`)
	case core.MySQL:
		// VARBINARY: names compare byte for byte, never by a PAD SPACE collation.
		s.up = append(s.up,
			`CREATE TABLE IF NOT EXISTS `+s.records+` (
	consumer VARBINARY(255) NOT NULL,
	msg_key VARBINARY(255) NOT NULL,
	received_at DATETIME(6) NOT NULL,
	PRIMARY KEY (consumer, msg_key),
	KEY `+idx+` (received_at)
) ENGINE=InnoDB`,
			`CREATE TABLE IF NOT EXISTS `+s.groups+` (
	consumer VARBINARY(255) NOT NULL,
	group_key VARBINARY(512) NOT NULL,
	seq BIGINT NOT NULL,
	updated_at DATETIME(6) NOT NULL,
	PRIMARY KEY (consumer, group_key),
	KEY `+gidx+` (updated_at)
) ENGINE=InnoDB`)
	}
	s.down = []string{`DROP TABLE IF EXISTS ` + s.groups, `DROP TABLE IF EXISTS ` + s.records}
	return s
}

// placeholders rewrites ? into $1, $2, … for PostgreSQL.
func placeholders(d core.Dialect, q string) string {
	if d != core.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func script(stmts []string) string {
	var b strings.Builder
	for _, st := range stmts {
		b.WriteString(st + ";\n\n")
	}
	return b.String()
}
