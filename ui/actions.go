package outboxerui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// An action is what a form asks for: op is retry, discard, pause or resume; scope is
// "ids" (the IDs given) or "filter" (the messages the filter selects that the
// confirmation page counted: their IDs when at most maxIDs, else those up to the
// highest ID counted).
type action struct {
	Instance, Outbox string
	Op, Scope        string
	IDs              []int64
	Filter           filter
	Upto             int64 // filter scope: the highest ID counted at confirmation
	Back             string
}

func readAction(form url.Values) (action, error) {
	a := action{Instance: form.Get("i"), Outbox: form.Get("o"), Op: form.Get("op"), Scope: form.Get("scope")}
	switch a.Op {
	case "retry", "discard":
	case "pause", "resume":
		return a, nil
	default:
		return a, fmt.Errorf("unknown action %q", a.Op)
	}
	switch a.Scope {
	case "ids":
		if err := a.readIDs(form); err != nil {
			return a, err
		}
		if len(a.IDs) == 0 {
			return a, fmt.Errorf("no message selected")
		}
	case "filter":
		f, err := readFilter(form)
		if err != nil {
			return a, err
		}
		a.Filter = f
		if a.Upto, err = optInt(form, "upto"); err != nil {
			return a, err
		}
		if err := a.readIDs(form); err != nil {
			return a, err
		}
	default:
		return a, fmt.Errorf("unknown scope %q", a.Scope)
	}
	return a, nil
}

// maxIDs bounds the IDs an action names.
const maxIDs = 10000

func (a *action) readIDs(form url.Values) error {
	for _, v := range form["id"] {
		for _, f := range strings.Split(v, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("%q is not a message ID", f)
			}
			a.IDs = append(a.IDs, id)
		}
	}
	slices.Sort(a.IDs)
	a.IDs = slices.Compact(a.IDs)
	if len(a.IDs) > maxIDs {
		return fmt.Errorf("%d messages selected; select at most %d, or act on the filter", len(a.IDs), maxIDs)
	}
	return nil
}

// fields are the action as form fields, for the confirmation's form.
func (a action) Fields() [][2]string {
	out := [][2]string{{"i", a.Instance}, {"o", a.Outbox}, {"op", a.Op}, {"scope", a.Scope}}
	if a.Scope == "ids" {
		for _, id := range a.IDs {
			out = append(out, [2]string{"id", strconv.FormatInt(id, 10)})
		}
	}
	if a.Scope == "filter" {
		if len(a.IDs) > 0 {
			s := make([]string, len(a.IDs))
			for i, id := range a.IDs {
				s[i] = strconv.FormatInt(id, 10)
			}
			out = append(out, [2]string{"id", strings.Join(s, ",")})
		}
		p := a.Filter.params()
		for i := 0; i+1 < len(p); i += 2 {
			if !isZero(p[i+1]) {
				out = append(out, [2]string{p[i].(string), fmt.Sprint(p[i+1])})
			}
		}
		out = append(out, [2]string{"upto", strconv.FormatInt(a.Upto, 10)})
	}
	return out
}

// back is where the action returns: the list it came from, or the outbox.
func (a action) back(extra ...any) string {
	base := []any{"i", a.Instance, "o", a.Outbox}
	switch {
	case a.Scope == "filter":
		return link("messages", append(append(base, a.Filter.params()...), extra...)...)
	case a.Scope == "ids" && len(a.IDs) == 1 && a.Op == "retry":
		return link("message", append(append(base, "id", a.IDs[0]), extra...)...)
	}
	return link("outbox", append(base, extra...)...)
}

type confirmData struct {
	Action  action
	Verb    string
	Summary []string // what will change, a line each
	Count   int64
	Cancel  string
}

// retryFilter is f restricted to the messages a retry changes: dead ones, and those
// waiting for a retry.
func retryFilter(f filter) filter {
	f.retryable = true
	return f
}

// posted reads the action a POST asks for, after its CSRF token, and the instance and
// outbox it names; on a failure it has answered the request and ok is false.
func (h *handler) posted(w http.ResponseWriter, r *http.Request) (a action, s *store, o string, boxes map[string]int, ok bool) {
	if err := h.checkCSRF(r); err != nil {
		h.fail(w, r, http.StatusForbidden, err)
		return a, nil, "", nil, false
	}
	a, err := readAction(r.PostForm)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return a, nil, "", nil, false
	}
	if s, o, boxes, ok = h.picked(w, r, r.PostForm); ok {
		a.Instance = s.name
	}
	return a, s, o, boxes, ok
}

func (h *handler) confirm(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a, s, o, _, ok := h.posted(w, r)
	if !ok {
		return
	}
	var err error
	d := confirmData{Action: a, Cancel: a.back()}
	where := fmt.Sprintf("outbox %q of %s (instance %s)", o, s.msgs, s.name)
	switch a.Op {
	case "pause":
		d.Verb = "Pause"
		d.Cancel = link("outbox", "i", s.name, "o", o)
		d.Summary = []string{"Stop delivering " + where + " on every node sharing the table, until it is resumed.", "Publishing goes on; the backlog grows."}
	case "resume":
		d.Verb = "Resume"
		d.Cancel = link("outbox", "i", s.name, "o", o)
		d.Summary = []string{"Restart delivering " + where + " on every node."}
	case "retry", "discard":
		d.Verb = map[string]string{"retry": "Retry", "discard": "Discard"}[a.Op]
		if d.Summary, d.Count, d.Action.Upto, d.Action.IDs, err = h.plan(ctx, s, o, a, where); err != nil {
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
	}
	h.render(w, r, http.StatusOK, "confirm", d.Verb+"?", false, d)
}

// plan describes what a retry or discard will change, and counts it.
// For a filter, it returns the IDs counted when there are at most maxIDs: the action then
// changes those of them the filter still selects, and no other.
func (h *handler) plan(ctx context.Context, s *store, o string, a action, where string) (lines []string, n, upto int64, counted []int64, err error) {
	if a.Scope == "ids" {
		dead, waiting, err := s.split(ctx, o, a.IDs)
		if err != nil {
			return nil, 0, 0, nil, err
		}
		if a.Op == "retry" {
			if len(dead) > 0 {
				lines = append(lines, fmt.Sprintf("Put %s back for delivery, attempts reset to 0: IDs %s.", plural(int64(len(dead)), "dead message"), idList(dead)))
			}
			if len(waiting) > 0 {
				lines = append(lines, fmt.Sprintf("Make %s due now (their attempts are kept): IDs %s.", plural(int64(len(waiting)), "message waiting for a retry"), idList(waiting)))
			}
			n = int64(len(dead) + len(waiting))
			if skipped := len(a.IDs) - int(n); skipped > 0 {
				lines = append(lines, fmt.Sprintf("%d of the selected messages are neither dead nor waiting for a retry (or are gone): they are left alone.", skipped))
			}
		} else {
			present, err := s.present(ctx, o, a.IDs)
			if err != nil {
				return nil, 0, 0, nil, err
			}
			n = int64(len(present))
			lines = append(lines, fmt.Sprintf("Delete %s for good, whatever their state: IDs %s. Groups they hold back move on.", plural(n, "message"), idList(present)))
			if skipped := len(a.IDs) - len(present); skipped > 0 {
				lines = append(lines, fmt.Sprintf("%d of the selected messages are gone already.", skipped))
			}
		}
		return append([]string{"In " + where + ":"}, lines...), n, 0, a.IDs, nil
	}
	f := a.Filter
	if a.Op == "retry" {
		f = retryFilter(f)
	}
	// The IDs, when few enough to carry in the form; else the count and the newest.
	counted, err = s.ids(ctx, o, f, 0, maxIDs+1)
	if err != nil {
		return nil, 0, 0, nil, err
	}
	if len(counted) <= maxIDs {
		n = int64(len(counted))
		if n > 0 {
			upto = counted[n-1]
		}
	} else if n, upto, err = s.count(ctx, o, f); err != nil {
		return nil, 0, 0, nil, err
	} else {
		counted = nil
	}
	what := describe(a.Filter)
	if a.Op == "retry" {
		lines = append(lines, fmt.Sprintf("Retry %s of %s %s: dead ones go back for delivery with their attempts reset, those waiting for a retry become due now.",
			plural(n, "message"), where, what))
	} else {
		lines = append(lines, fmt.Sprintf("Delete %s of %s %s for good. Groups they hold back move on.", plural(n, "message"), where, what))
	}
	switch {
	case len(counted) > 0:
		lines = append(lines, fmt.Sprintf("Only the messages counted now are touched (those of them still matching); in batches of %d.", h.cfg.BatchSize))
	case n > 0:
		lines = append(lines, fmt.Sprintf("Only messages up to ID %d, the newest counted now, are touched; in batches of %d.", upto, h.cfg.BatchSize))
	}
	return lines, n, upto, counted, nil
}

// describe says in words which messages a filter selects.
func describe(f filter) string {
	parts := []string{"in state " + f.State}
	add := func(format string, v any) { parts = append(parts, fmt.Sprintf(format, v)) }
	if f.Type != "" {
		add("of type %q", f.Type)
	}
	if f.Group != "" {
		add("in group %q", f.Group)
	}
	if f.HeaderKey != "" {
		if f.HeaderVal != "" {
			add("with header %s", fmt.Sprintf("%q = %q", f.HeaderKey, f.HeaderVal))
		} else {
			add("with header %q", f.HeaderKey)
		}
	}
	if f.Error != "" {
		add("whose last error contains %q", f.Error)
	}
	if f.MinID > 0 {
		add("with ID ≥ %d", f.MinID)
	}
	if f.MaxID > 0 {
		add("with ID ≤ %d", f.MaxID)
	}
	if f.Age > 0 {
		add("older than %s", f.Age)
	}
	return strings.Join(parts, ", ")
}

func idList(ids []int64) string {
	const most = 20
	s := make([]string, 0, most)
	for i, id := range ids {
		if i == most {
			s = append(s, fmt.Sprintf("and %d more", len(ids)-most))
			break
		}
		s = append(s, strconv.FormatInt(id, 10))
	}
	return strings.Join(s, ", ")
}

// do carries out a confirmed action and sends the browser back with its report.
func (h *handler) do(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a, s, o, boxes, ok := h.posted(w, r)
	if !ok {
		return
	}
	ob, err := s.admin(map[string]int{o: boxes[o]})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var n, batches int64
	switch a.Op {
	case "pause":
		err = ob.Pause(ctx, o)
	case "resume":
		err = ob.Resume(ctx, o)
	case "retry", "discard":
		apply := func(ids []int64) error {
			batches++
			if a.Op == "discard" {
				k, err := ob.Discard(ctx, o, ids...)
				n += k
				return err
			}
			dead, waiting, err := s.split(ctx, o, ids)
			if err != nil {
				return err
			}
			if len(dead) > 0 {
				k, err := ob.RetryDead(ctx, o, dead...)
				n += k
				if err != nil {
					return err
				}
			}
			k, err := s.retryNow(ctx, o, waiting)
			n += k
			return err
		}
		if a.Scope == "ids" {
			for chunk := range slices.Chunk(a.IDs, h.cfg.BatchSize) {
				if err = apply(chunk); err != nil {
					break
				}
			}
			break
		}
		f := a.Filter
		if a.Op == "retry" {
			f = retryFilter(f)
		}
		if a.Upto <= 0 {
			break // nothing was counted: nothing to do
		}
		if len(a.IDs) > 0 {
			// The messages counted, those of them the filter still selects.
			for chunk := range slices.Chunk(a.IDs, h.cfg.BatchSize) {
				ids, e := s.idsIn(ctx, o, f, chunk)
				if e == nil && len(ids) > 0 {
					e = apply(ids)
				}
				if err = e; err != nil {
					break
				}
			}
			break
		}
		if f.MaxID == 0 || f.MaxID > a.Upto {
			f.MaxID = a.Upto
		}
		var after int64
		for {
			ids, e := s.ids(ctx, o, f, after, h.cfg.BatchSize)
			if e != nil || len(ids) == 0 {
				err = e
				break
			}
			if err = apply(ids); err != nil {
				break
			}
			after = ids[len(ids)-1]
		}
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, fmt.Errorf("%s stopped after %s in %d batches: %w", a.Op, plural(n, "message"), batches, err))
		return
	}
	ns, bs := strconv.FormatInt(n, 10), strconv.FormatInt(batches, 10)
	if n == 0 {
		ns = "" // as link leaves it out
	}
	if batches == 0 {
		bs = ""
	}
	back := a.back("done", a.Op, "n", n, "b", batches, "s", h.flashSig(a.Op, ns, bs))
	if a.Op == "pause" || a.Op == "resume" {
		back = link("outbox", "i", s.name, "o", o, "done", a.Op, "s", h.flashSig(a.Op, "", ""))
	}
	// A relative Location: the browser resolves it against this page, wherever the
	// handler is mounted (http.Redirect would make it absolute from the stripped path).
	w.Header().Set("Location", back)
	w.WriteHeader(http.StatusSeeOther)
}
