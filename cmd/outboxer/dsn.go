package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver

	"github.com/outboxer-go/outboxer/core"
)

// target is a parsed --dsn: which driver opens it and how to name it in messages
// (never with its password).
type target struct {
	dialect core.Dialect
	driver  string
	source  string // what sql.Open gets
	name    string // for messages
	file    string // SQLite: the file
}

// keywordRE matches the start of a libpq keyword/value connection string
// ("host=127.0.0.1 user=postgres dbname=test"), the form GORM's PostgreSQL driver and
// many deployment tools hand out.
var keywordRE = regexp.MustCompile(`^[a-z_]+\s*=`)

// goMySQLRE matches a go-sql-driver/mysql DSN ("user:pass@tcp(host:3306)/db").
var goMySQLRE = regexp.MustCompile(`^[^/]*@(tcp|tcp6|unix)\(`)

// parseDSN reads a DSN: postgres:// or postgresql:// URLs and libpq keyword/value
// strings (pgx), mysql:// URLs and go-sql-driver/mysql DSNs, or a SQLite file path or
// file: URI. It does no I/O.
func parseDSN(dsn string) (*target, error) {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return nil, usagef("--dsn is required (or set OUTBOXER_DSN)")
	}
	scheme, _, hasScheme := strings.Cut(dsn, "://")
	switch {
	case hasScheme && (scheme == "postgres" || scheme == "postgresql"), !hasScheme && keywordRE.MatchString(dsn):
		return parsePostgres(dsn)
	case hasScheme && (scheme == "mysql" || scheme == "mariadb"):
		return parseMySQL(dsn)
	case !hasScheme && goMySQLRE.MatchString(dsn):
		return parseGoMySQL(dsn)
	case hasScheme && scheme == "sqlite":
		return parseSQLite(strings.TrimPrefix(dsn, scheme+"://"))
	case hasScheme:
		return nil, usagef("malformed DSN: unsupported scheme %q (use postgres://, host=… dbname=…, mysql://, or a SQLite file)", scheme)
	}
	return parseSQLite(dsn)
}

// parsePostgres reads a postgres:// URL or a libpq keyword/value string; pgx reads both,
// and the environment (PGHOST, PGUSER, …) for what they leave out.
func parsePostgres(dsn string) (*target, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("malformed PostgreSQL DSN: %s", redactErr(err, dsn))
	}
	host := cfg.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, fmt.Sprint(cfg.Port))
	}
	name := fmt.Sprintf("PostgreSQL database %q at %s", cfg.Database, host)
	return &target{dialect: core.Postgres, driver: "pgx", source: dsn, name: name}, nil
}

// parseGoMySQL reads a DSN in go-sql-driver/mysql's own form, as GORM's MySQL driver takes it.
func parseGoMySQL(dsn string) (*target, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, usagef("malformed MySQL DSN: %s", redactErr(err, dsn))
	}
	if cfg.DBName == "" {
		return nil, usagef("malformed MySQL DSN: no database name (want user:password@tcp(host:port)/database)")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &target{dialect: core.MySQL, driver: "mysql", source: cfg.FormatDSN(),
		name: fmt.Sprintf("MySQL database %q at %s", cfg.DBName, cfg.Addr)}, nil
}

func parseMySQL(dsn string) (*target, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, usagef("malformed MySQL DSN: %s", redactErr(err, dsn))
	}
	host := u.Host
	if host == "" {
		return nil, usagef("malformed MySQL DSN: no host (want mysql://user:password@host:port/database)")
	}
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, usagef("malformed MySQL DSN: want one database name in the path (mysql://user:password@host:port/database)")
	}
	// Let the driver read the query parameters, then set what the URL says.
	cfg, err := mysql.ParseDSN("tcp(" + host + ")/" + db + "?" + u.RawQuery)
	if err != nil {
		return nil, usagef("malformed MySQL DSN: %v", err)
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &target{dialect: core.MySQL, driver: "mysql", source: cfg.FormatDSN(),
		name: fmt.Sprintf("MySQL database %q at %s", db, host)}, nil
}

// parseSQLite turns a path or a file: URI into a modernc.org/sqlite DSN with WAL, a busy
// timeout and immediate transactions, unless the URI sets them itself.
func parseSQLite(dsn string) (*target, error) {
	path, query, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
	if path == "" {
		return nil, usagef("malformed DSN: no SQLite file in %q", dsn)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, usagef("malformed SQLite DSN: %v", err)
	}
	pragmas := strings.Join(q["_pragma"], " ")
	if !strings.Contains(pragmas, "busy_timeout") {
		q.Add("_pragma", "busy_timeout(10000)")
	}
	if !strings.Contains(pragmas, "journal_mode") {
		q.Add("_pragma", "journal_mode(WAL)")
	}
	if q.Get("_txlock") == "" {
		q.Set("_txlock", "immediate")
	}
	return &target{dialect: core.SQLite, driver: "sqlite", source: "file:" + path + "?" + q.Encode(),
		name: fmt.Sprintf("SQLite file %s", path), file: path}, nil
}

// passwordRE finds the password of a keyword/value DSN.
var passwordRE = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// redactErr prints err without the DSN's password.
func redactErr(err error, dsn string) string {
	msg := err.Error()
	if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	for _, m := range passwordRE.FindAllStringSubmatch(dsn, -1) {
		if pw := strings.Trim(m[1], "'"); pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	if !goMySQLRE.MatchString(dsn) {
		return msg
	}
	if cfg, perr := mysql.ParseDSN(dsn); perr == nil && cfg.Passwd != "" {
		msg = strings.ReplaceAll(msg, cfg.Passwd, "xxxxx")
	}
	return msg
}

// open connects to the database of dsn and checks that it answers. A SQLite file must
// exist unless create is set (so that a typo does not create an empty database).
func open(ctx context.Context, dsn string, create bool) (*sql.DB, *target, error) {
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	if t.file != "" && !create {
		if _, err := os.Stat(t.file); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil, fmt.Errorf("no SQLite database: %s does not exist", t.file)
			}
			return nil, nil, fmt.Errorf("cannot open SQLite file: %w", err)
		}
	}
	db, err := sql.Open(t.driver, t.source)
	if err != nil {
		return nil, nil, usagef("malformed DSN: %s", redactErr(err, dsn))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("cannot reach the %s: %s", t.name, redactErr(err, dsn))
	}
	return db, t, nil
}
