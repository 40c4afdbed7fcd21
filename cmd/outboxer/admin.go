package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// connect connects and picks the command's outboxes (every one in the table when none
// is named and all is set).
func connect(ctx context.Context, fs *flagSet, all bool) (*store, []string, error) {
	s, err := openStore(ctx, fs)
	if err != nil {
		return nil, nil, err
	}
	outboxes, err := s.pick(fs.outboxes, all)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, outboxes, nil
}

type countsJSON struct {
	Outbox    string `json:"outbox"`
	Pending   int64  `json:"pending"`
	Delivered int64  `json:"delivered"`
	Dead      int64  `json:"dead"`
}

func runCounts(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "counts")
	fs.outboxFlag("outbox to count; repeat for several (default: every outbox in the table)")
	fs.jsonFlag()
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("counts takes no arguments, got %q", pos)
	}
	ctx, cancel := fs.context(ctx)
	defer cancel()
	s, outboxes, err := connect(ctx, fs, true)
	if err != nil {
		return err
	}
	defer s.Close()
	ob, err := s.admin(outboxes, 0)
	if err != nil {
		return err
	}
	out := []countsJSON{}
	for _, name := range outboxes {
		c, err := ob.Counts(ctx, name)
		if err != nil {
			return err
		}
		out = append(out, countsJSON{Outbox: name, Pending: c.Pending, Delivered: c.Delivered, Dead: c.Dead})
	}
	if fs.json {
		return writeJSON(e.stdout, out)
	}
	tw := newTable(e.stdout, "OUTBOX", "PENDING", "DELIVERED", "DEAD")
	for _, c := range out {
		row(tw, c.Outbox, c.Pending, c.Delivered, c.Dead)
	}
	return tw.Flush()
}

func runPending(ctx context.Context, e *env, args []string) error {
	return runList(ctx, e, "pending", args)
}

func runDead(ctx context.Context, e *env, args []string) error {
	return runList(ctx, e, "dead", args)
}

func runList(ctx context.Context, e *env, name string, args []string) error {
	fs := newFlags(e, name)
	fs.outboxFlag("outbox to list; repeat for several (default: every outbox in the table)")
	fs.jsonFlag()
	limit := fs.Int("limit", core.DefaultListLimit, "most messages listed per outbox")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("%s takes no arguments, got %q", name, pos)
	}
	if *limit < 1 {
		return usagef("--limit must be at least 1, got %d", *limit)
	}
	ctx, cancel := fs.context(ctx)
	defer cancel()
	s, outboxes, err := connect(ctx, fs, true)
	if err != nil {
		return err
	}
	defer s.Close()
	ob, err := s.admin(outboxes, 0)
	if err != nil {
		return err
	}
	var all []core.Envelope
	for _, o := range outboxes {
		var envs []core.Envelope
		if name == "dead" {
			envs, err = ob.ListDead(ctx, o, *limit)
		} else {
			envs, err = ob.ListPending(ctx, o, *limit)
		}
		if err != nil {
			return err
		}
		if len(envs) == *limit {
			c, err := ob.Counts(ctx, o)
			if err != nil {
				return err
			}
			total := c.Pending
			if name == "dead" {
				total = c.Dead
			}
			if total > int64(len(envs)) {
				fmt.Fprintf(e.stderr, "outboxer %s: outbox %q: showing the oldest %d of %d %s messages (raise --limit for more)\n",
					name, o, len(envs), total, name)
			}
		}
		all = append(all, envs...)
	}
	if fs.json {
		out := make([]message, 0, len(all))
		for _, env := range all {
			out = append(out, toMessage(env))
		}
		return writeJSON(e.stdout, out)
	}
	now := time.Now()
	tw := newTable(e.stdout, "ID", "OUTBOX", "TYPE", "GROUP", "PART", "ATTEMPTS", "AGE", "NEXT", "LAST ERROR", "PAYLOAD")
	for _, env := range all {
		next := "now"
		if d := env.AvailableAt.Sub(now); d > 0 {
			next = "in " + age(d)
		}
		if name == "dead" {
			next = "-"
		}
		row(tw, env.ID, env.Outbox, orDash(env.Type), orDash(env.GroupKey), env.Partition, env.Attempts,
			age(now.Sub(env.CreatedAt)), next, preview([]byte(env.LastError), 40), preview(env.Payload, 40))
	}
	return tw.Flush()
}

// parseIDs reads message IDs from positional arguments.
func parseIDs(args []string) ([]int64, error) {
	var ids []int64
	for _, a := range args {
		for _, f := range strings.Split(a, ",") {
			if f == "" {
				continue
			}
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil || id < 1 {
				return nil, usagef("%q is not a message ID (a positive integer)", f)
			}
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// confirm asks the operator on stdin, unless yes is set.
func confirm(e *env, yes bool, prompt string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", prompt)
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	if !e.stdinTerminal || !strings.HasSuffix(line, "\n") {
		fmt.Fprintln(e.stderr) // the answer was not echoed: end the question's line
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	case "":
		if !e.stdinTerminal {
			return fmt.Errorf("%w (stdin is not a terminal and gave no answer: pass --yes to confirm)", errAborted)
		}
	}
	return errAborted
}

type changeJSON struct {
	Outbox   string  `json:"outbox"`
	Action   string  `json:"action"`
	Count    int64   `json:"count"`     // rows the database changed
	IDs      []int64 `json:"ids"`       // the messages acted on
	NotFound []int64 `json:"not_found"` // IDs asked for that did not qualify
}

func runRetry(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "retry")
	fs.outboxFlag("the outbox (may be left out when the table holds only one)")
	fs.jsonFlag()
	all := fs.Bool("all", false, "retry every dead message of the outbox")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	return change(ctx, e, fs, args, changeSpec{
		action: "retry", verb: "Retry", done: "retried", what: "dead message",
		all: all, allFlag: "--all", yes: yes,
		state: func(explicit bool) core.State { return core.Dead },
		apply: func(ctx context.Context, ob *core.Outboxer, outbox string, ids []int64) (int64, error) {
			return ob.RetryDead(ctx, outbox, ids...)
		},
	})
}

func runDiscard(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "discard")
	fs.outboxFlag("the outbox (may be left out when the table holds only one)")
	fs.jsonFlag()
	dead := fs.Bool("dead", false, "discard every dead message of the outbox")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	return change(ctx, e, fs, args, changeSpec{
		action: "discard", verb: "Discard (delete for good)", done: "discarded", what: "message",
		all: dead, allFlag: "--dead", yes: yes,
		state: func(explicit bool) core.State {
			if explicit {
				return -1 // any state
			}
			return core.Dead
		},
		apply: func(ctx context.Context, ob *core.Outboxer, outbox string, ids []int64) (int64, error) {
			return ob.Discard(ctx, outbox, ids...)
		},
	})
}

type changeSpec struct {
	action, verb, done, what string
	all                      *bool
	allFlag                  string
	yes                      *bool
	state                    func(explicit bool) core.State
	apply                    func(context.Context, *core.Outboxer, string, []int64) (int64, error)
}

// change runs retry or discard: it finds the messages, asks, changes them through the
// core, and says exactly which it changed.
func change(ctx context.Context, e *env, fs *flagSet, args []string, sp changeSpec) error {
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	ctx, cancel := fs.context(ctx)
	defer cancel()
	want, err := parseIDs(pos)
	if err != nil {
		return err
	}
	switch {
	case len(fs.outboxes) > 1:
		return usagef("name one --outbox, not %d", len(fs.outboxes))
	case len(want) == 0 && !*sp.all:
		return usagef("give message IDs, or %s", sp.allFlag)
	case len(want) > 0 && *sp.all:
		return usagef("give message IDs or %s, not both", sp.allFlag)
	}
	s, err := openStore(ctx, fs)
	if err != nil {
		return err
	}
	defer s.Close()
	outbox, err := s.pickOne(fs.outboxes)
	if err != nil {
		return err
	}
	outboxes := []string{outbox}
	ob, err := s.admin(outboxes, 0)
	if err != nil {
		return err
	}
	ids, err := s.ids(ctx, outbox, sp.state(len(want) > 0), want)
	if err != nil {
		return err
	}
	res := changeJSON{Outbox: outbox, Action: sp.action, IDs: ids, NotFound: []int64{}}
	for _, id := range want {
		if _, ok := slices.BinarySearch(ids, id); !ok {
			res.NotFound = append(res.NotFound, id)
		}
	}
	if len(res.NotFound) > 0 {
		fmt.Fprintf(e.stderr, "outboxer %s: not a %s of outbox %q, left alone: %s\n", sp.action, sp.what, outbox, idRanges(res.NotFound))
	}
	if len(ids) == 0 {
		res.IDs = []int64{}
		if fs.json {
			return writeJSON(e.stdout, res)
		}
		fmt.Fprintf(e.stdout, "nothing changed: no %s to %s in outbox %q\n", sp.what, sp.action, outbox)
		return nil
	}
	if err := confirm(e, *sp.yes, fmt.Sprintf("%s %s of outbox %q (ids %s)?", sp.verb, plural(int64(len(ids)), sp.what), outbox, idRanges(ids))); err != nil {
		return err
	}
	for chunk := range slices.Chunk(ids, 1000) {
		n, err := sp.apply(ctx, ob, outbox, chunk)
		res.Count += n
		if err != nil {
			return fmt.Errorf("%w (%s so far: %d)", err, sp.done, res.Count)
		}
	}
	if fs.json {
		return writeJSON(e.stdout, res)
	}
	fmt.Fprintf(e.stdout, "%s %s of outbox %q: ids %s\n", sp.done, plural(res.Count, sp.what), outbox, idRanges(ids))
	if res.Count != int64(len(ids)) {
		fmt.Fprintf(e.stdout, "note: %d of the %d messages changed state meanwhile and were left alone\n", int64(len(ids))-res.Count, len(ids))
	}
	return nil
}

func runPause(ctx context.Context, e *env, args []string) error {
	return runPauseResume(ctx, e, "pause", args)
}

func runResume(ctx context.Context, e *env, args []string) error {
	return runPauseResume(ctx, e, "resume", args)
}

func runPauseResume(ctx context.Context, e *env, name string, args []string) error {
	fs := newFlags(e, name)
	fs.outboxFlag("outbox to " + name + "; repeat for several (required)")
	fs.jsonFlag()
	partitions := fs.Int("partitions", 0, "partitions of the outbox, when no relay has run it yet (default: as found in the table)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("%s takes no arguments, got %q", name, pos)
	}
	ctx, cancel := fs.context(ctx)
	defer cancel()
	s, outboxes, err := connect(ctx, fs, false)
	if err != nil {
		return err
	}
	defer s.Close()
	ob, err := s.admin(outboxes, *partitions)
	if err != nil {
		return err
	}
	type result struct {
		Outbox string `json:"outbox"`
		Paused bool   `json:"paused"`
	}
	var out []result
	for _, o := range outboxes {
		if name == "pause" {
			err = ob.Pause(ctx, o)
		} else {
			err = ob.Resume(ctx, o)
		}
		if err != nil {
			return err
		}
		out = append(out, result{Outbox: o, Paused: name == "pause"})
	}
	if fs.json {
		return writeJSON(e.stdout, out)
	}
	for _, r := range out {
		if r.Paused {
			fmt.Fprintf(e.stdout, "paused outbox %q: relays stop delivering it (a batch in flight finishes); publishing goes on\n", r.Outbox)
		} else {
			fmt.Fprintf(e.stdout, "resumed outbox %q: relays deliver it again\n", r.Outbox)
		}
	}
	return nil
}

type partitionJSON struct {
	Partition     int        `json:"partition"`
	Backlog       int64      `json:"backlog"`
	Retrying      int64      `json:"retrying"`
	Scheduled     int64      `json:"scheduled"`
	OldestSeconds float64    `json:"oldest_pending_age_seconds"`
	Dead          int64      `json:"dead"`
	Owner         string     `json:"owner"`
	Token         int64      `json:"token"`
	LeaseExpires  *time.Time `json:"lease_expires,omitempty"`
	LeaseHeld     bool       `json:"lease_held"`
	Paused        bool       `json:"paused"`
}

type nodeJSON struct {
	Node          string    `json:"node"`
	Joined        time.Time `json:"joined"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	MaxPartitions int       `json:"max_partitions"`
	Share         int       `json:"share"`
	Partitions    []int     `json:"partitions"`
}

type statusJSON struct {
	Outbox        string          `json:"outbox"`
	Backlog       int64           `json:"backlog"`
	Retrying      int64           `json:"retrying"`
	Scheduled     int64           `json:"scheduled"`
	OldestSeconds float64         `json:"oldest_pending_age_seconds"`
	Dead          int64           `json:"dead"`
	Paused        bool            `json:"paused"`
	Owners        map[string]int  `json:"owners"`
	Unowned       []int           `json:"unowned"`
	Nodes         []nodeJSON      `json:"nodes"`
	Problems      []string        `json:"problems,omitempty"`
	Partitions    []partitionJSON `json:"partitions"`
}

func runStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "status")
	fs.outboxFlag("outbox to show; repeat for several (default: every outbox in the table)")
	fs.jsonFlag()
	var limits core.HealthLimits
	check := fs.Bool("check", false, "check the health against the limits below: exit 4 and name the problems when unhealthy")
	fs.DurationVar(&limits.MaxAge, "max-age", 0, "with --check: the oldest due message may wait this long (0: not checked)")
	fs.Int64Var(&limits.MaxPending, "max-pending", 0, "with --check: the largest backlog allowed (0: not checked)")
	fs.Int64Var(&limits.MaxDead, "max-dead", 0, "with --check: the most dead messages allowed (-1: not checked)")
	fs.BoolVar(&limits.AllowUnowned, "allow-unowned", false, "with --check: partitions no relay owns are not a problem")
	fs.BoolVar(&limits.FailPaused, "fail-paused", false, "with --check: a paused outbox is a problem")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("status takes no arguments, got %q", pos)
	}
	if !*check {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "max-age", "max-pending", "max-dead", "allow-unowned", "fail-paused":
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) == 1 {
			return usagef("%s applies only with --check", given[0])
		}
		if len(given) > 1 {
			return usagef("%s apply only with --check", strings.Join(given, ", "))
		}
	}
	if limits.MaxAge < 0 || limits.MaxPending < 0 {
		return usagef("--max-age and --max-pending cannot be negative")
	}
	ctx, cancel := fs.context(ctx)
	defer cancel()
	s, outboxes, err := connect(ctx, fs, true)
	if err != nil {
		return err
	}
	defer s.Close()
	ob, err := s.admin(outboxes, 0)
	if err != nil {
		return err
	}
	out := []statusJSON{}
	var health core.Health
	if ob != nil {
		if health, err = ob.Health(ctx, outboxes...); err != nil {
			return err
		}
	}
	var problems []error
	for _, h := range health.Outboxes {
		st := statusJSON{
			Outbox: h.Outbox, Backlog: h.Pending, Retrying: h.Retrying, Scheduled: h.Scheduled,
			OldestSeconds: h.OldestAge.Seconds(), Dead: h.Dead, Paused: h.Paused,
			Owners: h.Owners, Unowned: h.Unowned, Partitions: []partitionJSON{}, Nodes: []nodeJSON{},
		}
		for _, n := range h.Nodes {
			st.Nodes = append(st.Nodes, nodeJSON{Node: n.Node, Joined: n.Joined.UTC(), LastHeartbeat: n.LastHeartbeat.UTC(),
				MaxPartitions: n.MaxPartitions, Share: n.Share, Partitions: n.Partitions})
		}
		for _, p := range h.Partitions {
			pj := partitionJSON{
				Partition: p.Partition, Backlog: p.Pending, Retrying: p.Retrying, Scheduled: p.Scheduled,
				OldestSeconds: p.OldestAge.Seconds(), Dead: p.Dead, Owner: p.Owner, Token: p.Token,
				LeaseHeld: p.LeaseHeld, Paused: p.Paused,
			}
			if p.LeaseHeld {
				t := p.LeaseExpires.UTC()
				pj.LeaseExpires = &t
			}
			st.Partitions = append(st.Partitions, pj)
		}
		if *check {
			if err := h.Check(limits); err != nil {
				problems = append(problems, err)
				for _, e := range unjoin(err) {
					st.Problems = append(st.Problems, e.Error())
				}
			}
		}
		out = append(out, st)
	}
	if fs.json {
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else if err := printStatus(e, out); err != nil {
		return err
	}
	if len(problems) > 0 {
		return &unhealthyError{errors.Join(problems...)}
	}
	return nil
}

// unjoin lists the problems joined in err: each *core.HealthError, or err itself.
func unjoin(err error) []error {
	if _, ok := err.(*core.HealthError); ok {
		return []error{err}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// printStatus prints a line per outbox, then a line per partition.
func printStatus(e *env, out []statusJSON) error {
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	tw := newTable(e.stdout, "OUTBOX", "BACKLOG", "RETRYING", "SCHEDULED", "OLDEST", "DEAD", "OWNERS", "UNOWNED", "PAUSED")
	for _, st := range out {
		unowned := make([]string, len(st.Unowned))
		for i, p := range st.Unowned {
			unowned[i] = strconv.Itoa(p)
		}
		row(tw, st.Outbox, st.Backlog, st.Retrying, st.Scheduled, age(seconds(st.OldestSeconds)), st.Dead,
			len(st.Owners), orDash(strings.Join(unowned, ",")), yesNo(st.Paused))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	tw = newTable(e.stdout, "OUTBOX", "NODE", "HOLDS", "SHARE", "JOINED", "LAST HEARTBEAT")
	nodes := 0
	for _, st := range out {
		for _, n := range st.Nodes {
			nodes++
			parts := make([]string, len(n.Partitions))
			for i, p := range n.Partitions {
				parts[i] = strconv.Itoa(p)
			}
			share := strconv.Itoa(n.Share)
			if n.Share < 0 {
				share = "all it can"
			}
			row(tw, st.Outbox, n.Node, orDash(strings.Join(parts, ",")), share, n.Joined.Format(time.RFC3339Nano), n.LastHeartbeat.Format(time.RFC3339Nano))
		}
	}
	if nodes > 0 {
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout)
	}
	tw = newTable(e.stdout, "OUTBOX", "PART", "BACKLOG", "OLDEST", "DEAD", "OWNER", "LEASE", "PAUSED")
	for _, st := range out {
		for _, p := range st.Partitions {
			lease := "free"
			switch {
			case p.LeaseHeld:
				lease = "held until " + p.LeaseExpires.Format(time.RFC3339)
			case p.Owner != "":
				lease = "expired"
			}
			row(tw, st.Outbox, p.Partition, p.Backlog, age(seconds(p.OldestSeconds)),
				p.Dead, orDash(p.Owner), lease, yesNo(p.Paused))
		}
	}
	return tw.Flush()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
