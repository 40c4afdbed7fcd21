// Package sqlerr classifies the errors of the database/sql drivers Outboxer runs on, in
// one place for the core, the inbox, the adapters and the sinks. It imports no driver:
// it reads each driver's own error type through the methods and fields it has.
//
//   - pgx (*pgconn.PgError) and lib/pq (*pq.Error): a SQLState() string method.
//   - bun's pgdriver (pgdriver.Error, a value): a Field(byte) string method; the
//     SQLSTATE is Field('C').
//   - go-sql-driver/mysql (*mysql.MySQLError): the fields Number uint16 and SQLState [5]byte.
//   - modernc.org/sqlite and github.com/glebarez/go-sqlite (*sqlite.Error): a Code() int
//     method, the (extended) result code.
//   - mattn/go-sqlite3 (sqlite3.Error, a value): the integer fields Code and ExtendedCode.
//
// The message text is read only where the driver gives no code for the case (SQLite's
// "no such table" is a plain SQLITE_ERROR) or the error carries no driver error at all
// (a driver's error flattened into text by a wrapper).
package sqlerr

import (
	"reflect"
	"strings"
)

// Class is what an error says about the database's state.
type Class int

const (
	// Other is any error not classified below, including nil.
	Other Class = iota
	// Serialization is a serialization failure (SQLSTATE 40001): the transaction lost a
	// race with another one and can be run again.
	Serialization
	// Deadlock is a deadlock the database broke by rolling this transaction back
	// (PostgreSQL SQLSTATE 40P01, MySQL/MariaDB error 1213): it can be run again.
	Deadlock
	// MissingTable is a table (or, on PostgreSQL, a schema) that does not exist:
	// SQLSTATE 42P01 or 3F000, MySQL/MariaDB error 1146, SQLite's "no such table".
	MissingTable
	// LockTimeout is a lock not granted in time, or at once under NOWAIT: PostgreSQL
	// SQLSTATE 55P03 (lock_timeout, NOWAIT), MySQL/MariaDB error 1205 (a lock wait
	// timeout; at once with innodb_lock_wait_timeout 0) or 3572 (NOWAIT).
	LockTimeout
	// Busy is SQLite's SQLITE_BUSY or SQLITE_LOCKED: another connection (or a statement
	// of this one) holds the lock the statement needs, past the busy timeout.
	Busy
	// Unique is a unique or primary key violation: SQLSTATE 23505, MySQL/MariaDB error
	// 1062, SQLite's SQLITE_CONSTRAINT_UNIQUE or SQLITE_CONSTRAINT_PRIMARYKEY.
	Unique
)

var classNames = [...]string{"other", "serialization failure", "deadlock", "missing table", "lock timeout", "busy", "unique violation"}

func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "unknown"
	}
	return classNames[c]
}

// Retryable reports whether err is a serialization failure or a deadlock: the
// transaction was rolled back by the database and running it again may succeed.
func Retryable(err error) bool {
	c := Classify(err)
	return c == Serialization || c == Deadlock
}

// Is reports whether err is of class c.
func Is(err error, c Class) bool { return Classify(err) == c }

// Classify reads the class of err from the first driver error in its chain.
func Classify(err error) Class {
	if err == nil {
		return Other
	}
	code, ok := find(err)
	if !ok {
		return fromText(err.Error())
	}
	switch code.kind {
	case kindSQLState:
		return fromSQLState(code.state)
	case kindMySQL:
		switch code.number {
		case 1213:
			return Deadlock
		case 1205, 3572:
			return LockTimeout
		case 1146:
			return MissingTable
		case 1062, 1586:
			return Unique
		}
		// Other errors whose SQLSTATE says serialization failure (MySQL gives 40001 to a
		// deadlock and to some lock wait timeouts in serializable transactions).
		if code.state == "40001" {
			return Serialization
		}
		return Other
	case kindSQLite:
		switch code.sqlite & 0xff {
		case sqliteBusy, sqliteLocked:
			return Busy
		case sqliteConstraint:
			switch code.sqlite {
			case sqliteConstraintUnique, sqliteConstraintPrimaryKey:
				return Unique
			}
		case sqliteError:
			// SQLite has no code of its own for a missing table.
			if strings.Contains(code.msg, "no such table") {
				return MissingTable
			}
		}
	}
	return Other
}

// SQLState returns the SQLSTATE of err's driver error: that of a PostgreSQL driver
// (pgx, lib/pq, pgdriver) or of go-sql-driver/mysql; "" when err carries none.
func SQLState(err error) string {
	if err == nil {
		return ""
	}
	code, ok := find(err)
	if !ok || (code.kind != kindSQLState && code.kind != kindMySQL) {
		return ""
	}
	return code.state
}

func fromSQLState(s string) Class {
	switch s {
	case "40001":
		return Serialization
	case "40P01":
		return Deadlock
	case "42P01", "3F000":
		return MissingTable
	case "55P03":
		return LockTimeout
	case "23505":
		return Unique
	}
	return Other
}

// fromText classifies an error that carries no driver error by its text: the forms the
// drivers above print.
func fromText(msg string) Class {
	switch {
	case strings.Contains(msg, "SQLSTATE 40001"), strings.Contains(msg, "(SQLSTATE=40001)"):
		return Serialization
	case strings.Contains(msg, "SQLSTATE 40P01"), strings.Contains(msg, "(SQLSTATE=40P01)"), strings.Contains(msg, "Error 1213"):
		return Deadlock
	case strings.Contains(msg, "Error 1146"), strings.Contains(msg, "no such table"),
		strings.Contains(msg, "relation \"") && strings.Contains(msg, "does not exist"),
		strings.Contains(msg, "schema \"") && strings.Contains(msg, "does not exist"):
		return MissingTable
	case strings.Contains(msg, "Error 1205"), strings.Contains(msg, "Error 3572"):
		return LockTimeout
	case strings.Contains(msg, "SQLITE_BUSY"), strings.Contains(msg, "SQLITE_LOCKED"):
		return Busy
	}
	return Other
}

const (
	sqliteError                = 1
	sqliteBusy                 = 5
	sqliteLocked               = 6
	sqliteConstraint           = 19
	sqliteConstraintPrimaryKey = 1555
	sqliteConstraintUnique     = 2067
)

type kind int

const (
	kindSQLState kind = iota + 1 // a PostgreSQL SQLSTATE
	kindMySQL                    // a MySQL error number and SQLSTATE
	kindSQLite                   // a SQLite (extended) result code
)

type code struct {
	kind   kind
	state  string
	number int
	sqlite int
	msg    string
}

// find returns the code of the first driver error in err's chain.
func find(err error) (code, bool) {
	var found code
	ok := false
	walk(err, func(e error) bool {
		found, ok = codeOf(e)
		return ok
	})
	return found, ok
}

// walk calls f on err and every error it wraps, depth first, until f returns true.
func walk(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	if f(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return walk(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if walk(e, f) {
				return true
			}
		}
	}
	return false
}

// codeOf reads the code of e itself, if e is one of the drivers' errors.
func codeOf(e error) (code, bool) {
	switch v := e.(type) {
	case interface{ SQLState() string }: // pgx, lib/pq
		if s := v.SQLState(); s != "" {
			return code{kind: kindSQLState, state: s}, true
		}
	case interface{ Field(byte) string }: // bun's pgdriver
		if s := v.Field('C'); len(s) == 5 {
			return code{kind: kindSQLState, state: s}, true
		}
	case interface{ Code() int }: // modernc.org/sqlite, glebarez/go-sqlite
		if strings.Contains(pkgPath(e), "sqlite") {
			return code{kind: kindSQLite, sqlite: v.Code(), msg: e.Error()}, true
		}
	}
	rv := reflect.ValueOf(e)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return code{}, false
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return code{}, false
	}
	// go-sql-driver/mysql's MySQLError: Number uint16, SQLState [5]byte.
	if n, s := rv.FieldByName("Number"), rv.FieldByName("SQLState"); isUint(n) && s.IsValid() &&
		s.Kind() == reflect.Array && s.Len() == 5 && s.Type().Elem().Kind() == reflect.Uint8 {
		var b [5]byte
		reflect.Copy(reflect.ValueOf(b[:]), s)
		return code{kind: kindMySQL, number: int(n.Uint()), state: strings.TrimRight(string(b[:]), "\x00")}, true
	}
	// mattn/go-sqlite3's Error: Code and ExtendedCode, integers.
	if c, x := rv.FieldByName("Code"), rv.FieldByName("ExtendedCode"); isInt(c) && isInt(x) {
		ext := int(x.Int())
		if ext == 0 {
			ext = int(c.Int())
		}
		return code{kind: kindSQLite, sqlite: ext, msg: e.Error()}, true
	}
	return code{}, false
}

func isInt(v reflect.Value) bool {
	if !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

func isUint(v reflect.Value) bool {
	if !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func pkgPath(e error) string {
	t := reflect.TypeOf(e)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}
