package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Exit codes.
const (
	exitOK        = 0 // the command did what it was asked
	exitRuntime   = 1 // the database, the outbox or the relay failed (unreachable, unknown outbox, …)
	exitUsage     = 2 // the command line or the configuration is wrong; nothing was done
	exitAborted   = 3 // a destructive command was not confirmed; nothing was changed
	exitUnhealthy = 4 // status --check found an outbox outside its limits
)

// usageError is bad input found before anything was done: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// unhealthyError: status --check found problems: exit code 4.
type unhealthyError struct{ err error }

func (e *unhealthyError) Error() string { return "unhealthy: " + e.err.Error() }
func (e *unhealthyError) Unwrap() error { return e.err }

// errAborted: the operator did not confirm: exit code 3.
var errAborted = errors.New("not confirmed: nothing was changed")

// env is what a command runs with: its streams, so that they can be replaced in tests.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// stdinTerminal reports whether stdin is a terminal an operator types into.
	stdinTerminal bool
}

type command struct {
	name    string
	args    string // synopsis of positional arguments
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"migrate", "[up|down]", "create (up) or drop (down) the outbox tables, or print their SQL with --print-sql", runMigrate},
		{"counts", "", "count the messages of each outbox by state", runCounts},
		{"pending", "", "list pending messages, oldest first (with their attempts and last error)", runPending},
		{"dead", "", "list dead messages, oldest first", runDead},
		{"retry", "[ID...]", "put dead messages back for delivery (the IDs given, or every dead one with --all)", runRetry},
		{"discard", "[ID...]", "delete messages for good (the IDs given, or every dead one with --dead)", runDiscard},
		{"pause", "", "stop delivering an outbox on every node until resume", runPause},
		{"resume", "", "restart delivering a paused outbox", runResume},
		{"status", "", "show each outbox and partition: backlog, lag, retries, dead, owners, paused; --check for probes", runStatus},
		{"relay", "", "deliver outboxes to brokers, as configured in a YAML or TOML file (--config)", runRelay},
		{"ui", "", "serve the web dashboard (loopback by default; --basic-auth, --read-only)", runUI},
	}
}

func main() {
	// The MySQL driver logs connection trouble on its own; the CLI reports errors itself.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, stdinTerminal: isTerminal(os.Stdin)}
	os.Exit(run(context.Background(), e, os.Args[1:]))
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// run runs the command line args and returns the exit code. Errors are printed on one
// line to stderr.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printUsage(e.stderr)
		return exitUsage
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		if len(args) > 1 {
			return run(ctx, e, []string{args[1], "--help"})
		}
		printUsage(e.stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			err := c.run(ctx, e, args[1:])
			return report(e, name, err)
		}
	}
	fmt.Fprintf(e.stderr, "outboxer: unknown command %q (run outboxer help)\n", name)
	return exitUsage
}

func report(e *env, name string, err error) int {
	var ue *usageError
	var he *unhealthyError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "outboxer %s: %s\n", name, oneLine(ue.msg))
		return exitUsage
	case errors.Is(err, errAborted):
		fmt.Fprintf(e.stderr, "outboxer %s: %s\n", name, oneLine(err.Error()))
		return exitAborted
	case errors.As(err, &he):
		// One problem a line: an operator reads them, a script counts them.
		for _, p := range unjoin(he.err) {
			fmt.Fprintf(e.stderr, "outboxer %s: unhealthy: %s\n", name, oneLine(p.Error()))
		}
		return exitUnhealthy
	}
	fmt.Fprintf(e.stderr, "outboxer %s: %s\n", name, oneLine(err.Error()))
	return exitRuntime
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r\n", " ")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `outboxer inspects, repairs and relays Outboxer outbox tables.

Usage:
  outboxer <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Common flags (run outboxer <command> -h for each command's own):
  --dsn       database: postgres://… or postgresql://… or "host=… user=… dbname=…"
              (PostgreSQL), mysql://user:pass@host:port/db or user:pass@tcp(host:port)/db
              (MySQL, MariaDB), or a SQLite file (path or file: URI); default $OUTBOXER_DSN
  --table     message table (default outboxer_messages)
  --schema    PostgreSQL schema of the tables (default: the connection's search_path)
  --outbox    outbox name; repeat it for several (default: every outbox in the table)
  --json      print JSON instead of tables

Exit codes: 0 done, 1 runtime error (database, unknown outbox, relay),
2 usage error (flags, DSN, configuration; nothing was done),
3 a destructive command was not confirmed (nothing was changed),
4 status --check found an outbox outside its limits.
`)
}

// flagSet is a command's flags. Flags and positional arguments may be mixed.
type flagSet struct {
	*flag.FlagSet
	cmd command

	dsn, table, schema string
	outboxes           stringList
	timeout            time.Duration
	json               bool
}

type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	if v == "" {
		return errors.New("an outbox name cannot be empty")
	}
	*l = append(*l, v)
	return nil
}

// newFlags returns the flag set of a command with the flags every database command has.
func newFlags(e *env, name string) *flagSet {
	var cmd command
	for _, c := range commands {
		if c.name == name {
			cmd = c
		}
	}
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), cmd: cmd}
	fs.SetOutput(io.Discard)
	fs.StringVar(&fs.dsn, "dsn", os.Getenv("OUTBOXER_DSN"), "database: postgres:// URL or \"host=… user=… dbname=…\", mysql://user:pass@host:port/db or user:pass@tcp(host:port)/db, or a SQLite file path or file: URI (default $OUTBOXER_DSN)")
	fs.StringVar(&fs.table, "table", "outboxer_messages", "message table")
	fs.StringVar(&fs.schema, "schema", "", "PostgreSQL schema of the tables (default: the connection's search_path)")
	if name != "relay" && name != "ui" {
		fs.DurationVar(&fs.timeout, "timeout", 30*time.Second, "time limit of the command")
	}
	fs.Usage = func() {
		w := e.stdout
		summary := cmd.summary
		if summary != "" {
			summary = strings.ToUpper(summary[:1]) + summary[1:]
		}
		fmt.Fprintf(w, "Usage: %s\n\n%s.\n\nFlags:\n", strings.TrimSpace("outboxer "+cmd.name+" [flags] "+cmd.args), summary)
		printFlags(w, fs.FlagSet)
	}
	return fs
}

// printFlags lists the flags as the documentation writes them: --name, with the kind
// of value each takes and its default when it has one.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		if kind == "value" {
			kind = "name"
		}
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		switch {
		case f.Name == "dsn": // its usage says where the default comes from; never print a password
		case f.DefValue == "", f.DefValue == "0", f.DefValue == "false", f.DefValue == "0s":
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func (fs *flagSet) outboxFlag(help string) { fs.Var(&fs.outboxes, "outbox", help) }
func (fs *flagSet) jsonFlag()              { fs.BoolVar(&fs.json, "json", false, "print JSON instead of a table") }

// parse parses args, allowing flags after positional arguments, and returns the
// positional arguments.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err // the flag package printed the usage
			}
			return nil, usagef("%v (run outboxer %s -h)", err, fs.Name())
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// context returns the command's context, bounded by --timeout.
func (fs *flagSet) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if fs.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, fs.timeout)
}
