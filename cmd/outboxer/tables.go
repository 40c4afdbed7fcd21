package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxer-go/outboxer/internal/sqlerr"

	"github.com/outboxer-go/outboxer/core"
)

// identRE is the rule the core applies to table and schema names: letters, digits and
// _, not starting with a digit, at most 63 characters (PostgreSQL's limit, which binds a
// schema name). A table name is shorter still: at most core.MaxTableLen.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// checkNames refuses table and schema names that the core would refuse, before any
// connection is made, so that a bad name runs nothing. The table's limit is the core's
// own constant, so that the two cannot disagree.
func checkNames(table, schema string, d core.Dialect) error {
	if len(table) > core.MaxTableLen || !identRE.MatchString(table) {
		return usagef("invalid --table %q: use letters, digits and _ (not first), at most %d", table, core.MaxTableLen)
	}
	if schema != "" {
		if !identRE.MatchString(schema) {
			return usagef("invalid --schema %q: use letters, digits and _ (not first), at most 63", schema)
		}
		if d != "" && d != core.Postgres {
			return usagef("--schema is for PostgreSQL only (the database is %s)", d)
		}
	}
	return nil
}

// store is an open database with the names of the outbox tables in it.
type store struct {
	db      *sql.DB
	t       *target
	table   string
	schema  string
	msgs    string // quoted, qualified message table
	leases  string // quoted, qualified lease table
	outboxN map[string]int
}

func quote(d core.Dialect, name string) string {
	if d == core.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

func (s *store) qualified(name string) string {
	if s.schema != "" {
		return quote(s.t.dialect, s.schema) + "." + quote(s.t.dialect, name)
	}
	return quote(s.t.dialect, name)
}

// ph returns the n-th placeholder of the dialect.
func (s *store) ph(n int) string {
	if s.t.dialect == core.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// openStore validates the names, connects and reads which outboxes the table holds.
func openStore(ctx context.Context, fs *flagSet) (*store, error) {
	if err := checkNames(fs.table, fs.schema, ""); err != nil {
		return nil, err
	}
	t, err := parseDSN(fs.dsn)
	if err != nil {
		return nil, err
	}
	if err := checkNames(fs.table, fs.schema, t.dialect); err != nil {
		return nil, err
	}
	db, t, err := open(ctx, fs.dsn, false)
	if err != nil {
		return nil, err
	}
	s := &store{db: db, t: t, table: fs.table, schema: fs.schema}
	s.msgs = s.qualified(fs.table)
	s.leases = s.qualified(fs.table + "_leases")
	if err := s.discover(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *store) Close() error { return s.db.Close() }

// discover reads the outboxes present in the table (messages or lease rows) and the
// number of partitions each has used.
func (s *store) discover(ctx context.Context) error {
	s.outboxN = map[string]int{}
	for _, q := range []string{
		`SELECT outbox, MAX(part) FROM ` + s.msgs + ` GROUP BY outbox`,
		`SELECT outbox, MAX(part) FROM ` + s.leases + ` GROUP BY outbox`,
	} {
		rows, err := s.db.QueryContext(ctx, q)
		if err != nil {
			return s.tableErr(ctx, err)
		}
		for rows.Next() {
			var name string
			var maxPart int
			if err := rows.Scan(&name, &maxPart); err != nil {
				rows.Close()
				return fmt.Errorf("read outboxes of %s: %w", s.table, err)
			}
			s.outboxN[name] = max(s.outboxN[name], maxPart+1)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return s.tableErr(ctx, err)
		}
	}
	return nil
}

func (s *store) tableErr(ctx context.Context, err error) error {
	if sqlerr.Is(err, sqlerr.MissingTable) {
		if hint := s.schemaHint(ctx); hint != "" {
			return fmt.Errorf("table %s is missing in the %s: %s: %w", s.msgs, s.t.name, hint, err)
		}
		return fmt.Errorf("table %s is missing in the %s (create it with outboxer migrate up): %w", s.msgs, s.t.name, err)
	}
	return fmt.Errorf("cannot read table %s: %w", s.msgs, err)
}

// schemaHint says, on PostgreSQL, why the table may be missing when the schema is the
// cause: the --schema named does not exist, or the table is in another schema than the
// search path. It returns "" when it finds neither (or cannot look).
func (s *store) schemaHint(ctx context.Context) string {
	if s.t.dialect != core.Postgres {
		return ""
	}
	var others []string
	rows, err := s.db.QueryContext(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = $1 ORDER BY 1`, s.table)
	if err != nil {
		return ""
	}
	for rows.Next() {
		var name string
		if rows.Scan(&name) == nil && name != s.schema {
			others = append(others, name)
		}
	}
	rows.Close()
	elsewhere := ""
	if len(others) > 0 {
		list := strings.Join(others[:min(len(others), 5)], ", ")
		if len(others) > 5 {
			list += fmt.Sprintf(" and %d more", len(others)-5)
		}
		elsewhere = fmt.Sprintf("; a table %s is in schema %s: pass --schema %s", s.table, list, others[0])
	}
	if s.schema != "" {
		var exists bool
		if err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
			return ""
		}
		if !exists {
			return fmt.Sprintf("schema %s does not exist (check --schema; outboxer migrate up --schema %s would create it with empty tables)%s", s.schema, s.schema, elsewhere)
		}
	}
	if elsewhere == "" {
		return ""
	}
	where := "the connection's search_path"
	if s.schema != "" {
		where = "schema " + s.schema
	}
	return fmt.Sprintf("it is not in %s%s (or create it there with outboxer migrate up)", where, elsewhere)
}

// present returns the outboxes found in the table, sorted.
func (s *store) present() []string {
	names := make([]string, 0, len(s.outboxN))
	for n := range s.outboxN {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// pick returns the outboxes a command works on: those named (each must be in the
// table), or, when none is named and all is set, every one in the table.
func (s *store) pick(named []string, all bool) ([]string, error) {
	if len(named) == 0 {
		if !all {
			return nil, usagef("--outbox is required")
		}
		return s.present(), nil
	}
	var out []string
	for _, n := range named {
		if _, ok := s.outboxN[n]; !ok {
			have := "none"
			if p := s.present(); len(p) > 0 {
				have = strings.Join(p, ", ")
			}
			return nil, fmt.Errorf("unknown outbox %q: no messages and no partitions in %s (outboxes there: %s)", n, s.msgs, have)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// pickOne returns the outbox a command that works on one outbox acts on: the one named,
// or, when none is named, the only one in the table. With several there, it names them.
func (s *store) pickOne(named []string) (string, error) {
	if len(named) > 0 {
		out, err := s.pick(named, false)
		if err != nil {
			return "", err
		}
		return out[0], nil
	}
	switch p := s.present(); len(p) {
	case 1:
		return p[0], nil
	case 0:
		return "", fmt.Errorf("no outbox in %s: it holds no messages and no partitions", s.msgs)
	default:
		return "", usagef("name the outbox with --outbox: %s holds %d (%s)", s.msgs, len(p), strings.Join(p, ", "))
	}
}

// admin returns a publish-only instance of the core configured with the outboxes, so
// that the core's admin operations can run on them. partitions, when positive,
// overrides the number of partitions found in the table.
func (s *store) admin(outboxes []string, partitions int) (*core.Outboxer, error) {
	if len(outboxes) == 0 {
		return nil, nil // nothing to do: the callers loop over no outbox
	}
	cfg := core.Config{
		Name:        "outboxer-cli",
		DB:          s.db,
		Dialect:     s.t.dialect,
		Table:       s.table,
		Schema:      s.schema,
		PublishOnly: true,
		Outboxes:    map[string]core.OutboxConfig{},
	}
	for _, n := range outboxes {
		p := max(s.outboxN[n], 1)
		if partitions > 0 {
			p = partitions
		}
		cfg.Outboxes[n] = core.OutboxConfig{Partitions: p}
	}
	return core.New(cfg)
}

// ids returns, in ID order, the IDs of the outbox's messages in state (all states
// when state < 0) among want (all when want is empty).
func (s *store) ids(ctx context.Context, outbox string, state core.State, want []int64) ([]int64, error) {
	var found []int64
	scan := func(q string, args ...any) error {
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			found = append(found, id)
		}
		return rows.Err()
	}
	base := `SELECT id FROM ` + s.msgs + ` WHERE outbox = ` + s.ph(1)
	args := []any{outbox}
	if state >= 0 {
		base += ` AND state = ` + s.ph(2)
		args = append(args, int(state))
	}
	if len(want) == 0 {
		if err := scan(base+` ORDER BY id`, args...); err != nil {
			return nil, fmt.Errorf("read messages of %q: %w", outbox, err)
		}
		return found, nil
	}
	for chunk := range slices.Chunk(want, 500) {
		q := base + ` AND id IN (`
		a := slices.Clone(args)
		for i, id := range chunk {
			if i > 0 {
				q += ", "
			}
			a = append(a, id)
			q += s.ph(len(a))
		}
		if err := scan(q+`)`, a...); err != nil {
			return nil, fmt.Errorf("read messages of %q: %w", outbox, err)
		}
	}
	slices.Sort(found)
	return found, nil
}
