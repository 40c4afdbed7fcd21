package outboxerui

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// page is what every page's template receives.
type page struct {
	Title    string
	CSRF     string
	ReadOnly bool
	Refresh  int // seconds; 0: no auto-refresh
	Flash    string
	Now      time.Time
	Data     any
}

var funcs = template.FuncMap{
	"link":  link,
	"state": stateName,
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return human(time.Since(t)) + " ago"
	},
	"until": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		if d := time.Until(t); d > 0 {
			return "in " + human(d)
		}
		return "now"
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return human(d)
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"preview": preview,
	"bytes":   humanBytes,
	"join": func(p []int) string {
		s := make([]string, len(p))
		for i, v := range p {
			s[i] = strconv.Itoa(v)
		}
		return strings.Join(s, ", ")
	},
	"retryable": retryable,
}

var pageNames = []string{"overview", "outbox", "messages", "message", "confirm", "error"}

func (h *handler) parseTemplates() error {
	h.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("outboxerui: parse template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	return nil
}

// render writes a page; data becomes page.Data.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, refresh bool, data any) {
	p := page{Title: title, CSRF: h.csrfToken(w, r), ReadOnly: h.cfg.ReadOnly, Now: time.Now(), Data: data, Flash: h.flash(r.URL.Query())}
	if refresh {
		p.Refresh = h.refreshed
	}
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, p); err != nil {
		slog.Error("outboxerui: render", "page", name, "err", err)
		http.Error(w, "cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail shows an error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	h.render(w, r, status, "error", http.StatusText(status), false, err.Error())
}

// link builds a relative link to a page of the dashboard with query parameters given as
// name, value pairs (empty strings and zero numbers are left out).
func link(pageName string, kv ...any) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if isZero(kv[i+1]) {
			continue
		}
		v.Add(fmt.Sprint(kv[i]), fmt.Sprint(kv[i+1]))
	}
	if len(v) == 0 {
		return pageName
	}
	return pageName + "?" + v.Encode()
}

func isZero(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case int:
		return x == 0
	case int64:
		return x == 0
	}
	return v == nil
}

func stateName(st int) string {
	switch st {
	case stReady:
		return "ready"
	case stDelivered:
		return "delivered"
	case stDead:
		return "dead"
	case stWaiting:
		return "waiting"
	case stHeld:
		return "held"
	}
	return strconv.Itoa(st)
}

func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd%s", d/(24*time.Hour), (d % (24 * time.Hour)).Round(time.Hour))
}

func humanBytes(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// preview shows the start of a payload on one line: text as it is, binary as hex. b is
// the payload's first bytes, of size in all: a character it cuts in two is left out.
func preview(b []byte, size int64) string {
	if size > int64(len(b)) {
		b = cutRune(b)
	}
	if utf8.Valid(b) {
		s := strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return ' '
			}
			return r
		}, string(b))
		if len(s) > 60 {
			i := 60
			for i > 0 && !utf8.RuneStart(s[i]) {
				i--
			}
			s = s[:i] + "…"
		}
		return s
	}
	if len(b) > 24 {
		return hex.EncodeToString(b[:24]) + "…"
	}
	return hex.EncodeToString(b)
}

// flash is the report of an action, from the numbers the action's redirect carries.
// The report is shown only when the handler signed it (q's "s"): a link from elsewhere
// cannot make the page say that messages were discarded.
func (h *handler) flash(q url.Values) string {
	if q.Get("done") == "" || !hmac.Equal([]byte(q.Get("s")), []byte(h.flashSig(q.Get("done"), q.Get("n"), q.Get("b")))) {
		return ""
	}
	n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
	b, _ := strconv.ParseInt(q.Get("b"), 10, 64)
	batches := fmt.Sprintf(" (%d batch%s)", b, map[bool]string{true: "", false: "es"}[b == 1])
	switch q.Get("done") {
	case "retry":
		return fmt.Sprintf("Retried %s%s.", plural(n, "message"), batches)
	case "discard":
		return fmt.Sprintf("Discarded %s%s.", plural(n, "message"), batches)
	case "pause":
		return "Paused: delivery stops on every node within a quarter of the lease duration; publishing goes on."
	case "resume":
		return "Resumed: delivery restarts."
	}
	return ""
}

// flashSig signs the report of an action, as its redirect carries it.
func (h *handler) flashSig(done, n, b string) string {
	return h.sign("flash\x00" + done + "\x00" + n + "\x00" + b)[:32]
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// overviewData is the overview page.
type overviewData struct {
	Instances      []instanceView
	Cap, SampleCap int // see countCap
}

type instanceView struct {
	Name     string
	Table    string
	Err      string
	At       time.Time
	Outboxes []outboxStats
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := overviewData{Cap: countCap, SampleCap: sampleCap}
	for _, s := range h.stores {
		iv := instanceView{Name: s.name, Table: s.msgs}
		if err := h.readInstance(ctx, s, &iv); err != nil {
			iv.Err = err.Error()
		}
		d.Instances = append(d.Instances, iv)
	}
	h.render(w, r, http.StatusOK, "overview", "Outboxes", true, d)
}

func (h *handler) readInstance(ctx context.Context, s *store, iv *instanceView) error {
	boxes, err := s.outboxes(ctx)
	if err != nil || len(boxes) == 0 {
		return err
	}
	leases, _, err := s.readLeases(ctx)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(boxes)) {
		st, err := s.readStats(ctx, name, configured(boxes[name]), leases[name], false)
		if err != nil {
			return err
		}
		iv.At = st.At
		iv.Outboxes = append(iv.Outboxes, st)
	}
	return nil
}

// configured lists the partitions of an outbox of n partitions.
func configured(n int) []int {
	ps := make([]int, max(n, 1))
	for i := range ps {
		ps[i] = i
	}
	return ps
}

var errNotFound = errors.New("not found")

// pick reads the instance and outbox a request names (i, o), and the outboxes of that
// instance.
func (h *handler) pick(ctx context.Context, q url.Values) (*store, string, map[string]int, error) {
	name := q.Get("i")
	s, ok := h.byName[name]
	if !ok {
		if name == "" && len(h.stores) == 1 {
			s = h.stores[0]
		} else {
			return nil, "", nil, fmt.Errorf("%w: no instance %q", errNotFound, name)
		}
	}
	boxes, err := s.outboxes(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	o := q.Get("o")
	if _, ok := boxes[o]; !ok {
		return nil, "", nil, fmt.Errorf("%w: no outbox %q in %s (instance %s)", errNotFound, o, s.msgs, s.name)
	}
	return s, o, boxes, nil
}

// picked is pick for a handler: on a failure it has answered the request (404 for an
// unknown instance or outbox) and ok is false.
func (h *handler) picked(w http.ResponseWriter, r *http.Request, q url.Values) (*store, string, map[string]int, bool) {
	s, o, boxes, err := h.pick(r.Context(), q)
	switch {
	case errors.Is(err, errNotFound):
		h.fail(w, r, http.StatusNotFound, err)
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, err)
	default:
		return s, o, boxes, true
	}
	return nil, "", nil, false
}

type outboxData struct {
	Instance       string
	Outbox         outboxStats
	Blocked        []blocked
	More           bool
	Cap, SampleCap int // see countCap
}

func (h *handler) outbox(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	s, o, boxes, ok := h.picked(w, r, r.URL.Query())
	if !ok {
		return
	}
	leases, _, err := s.readLeases(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	st, err := s.readStats(ctx, o, configured(boxes[o]), leases[o], true)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	const most = 50
	bl, err := s.blockedGroups(ctx, o, most+1)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d := outboxData{Instance: s.name, Outbox: st, Blocked: bl, Cap: countCap, SampleCap: sampleCap}
	if len(bl) > most {
		d.Blocked, d.More = bl[:most], true
	}
	h.render(w, r, http.StatusOK, "outbox", "Outbox "+o, true, d)
}

// readFilter reads a filter from request values; the error names a bad value.
func readFilter(q url.Values) (filter, error) {
	f := filter{State: q.Get("state"), Type: q.Get("type"), Group: q.Get("group"), HeaderKey: q.Get("hk"), HeaderVal: q.Get("hv"), Error: q.Get("err")}
	if f.State == "" {
		f.State = "pending"
	}
	if !slices.Contains(states, f.State) {
		return filter{}, fmt.Errorf("unknown state %q (one of %s)", f.State, strings.Join(states, ", "))
	}
	var err error
	if f.MinID, err = optInt(q, "min"); err != nil {
		return filter{}, err
	}
	if f.MaxID, err = optInt(q, "max"); err != nil {
		return filter{}, err
	}
	if a := q.Get("age"); a != "" {
		if f.Age, err = time.ParseDuration(a); err != nil || f.Age < 0 {
			return filter{}, fmt.Errorf("age %q is not a duration like 90s, 15m or 2h", a)
		}
	}
	return f, nil
}

func optInt(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q is not a message ID", name, v)
	}
	return n, nil
}

// params are the filter as link parameters.
func (f filter) params() []any {
	age := ""
	if f.Age > 0 {
		age = f.Age.String()
	}
	return []any{"state", f.State, "type", f.Type, "group", f.Group, "hk", f.HeaderKey, "hv", f.HeaderVal, "err", f.Error, "min", f.MinID, "max", f.MaxID, "age", age}
}

type messagesData struct {
	Instance, Outbox string
	Filter           filter
	States           []string
	Rows             []row
	Prev, Next       string // links; "" when none
	First            string
	Err              string
}

func (d messagesData) Params() []any {
	return append([]any{"i", d.Instance, "o", d.Outbox}, d.Filter.params()...)
}

func (h *handler) messages(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	s, o, _, ok := h.picked(w, r, q)
	if !ok {
		return
	}
	d := messagesData{Instance: s.name, Outbox: o, States: states}
	f, err := readFilter(q)
	if err != nil {
		d.Filter = filter{State: "pending"}
		d.Err = err.Error()
		h.render(w, r, http.StatusBadRequest, "messages", "Messages of "+o, false, d)
		return
	}
	d.Filter = f
	after, _ := optInt(q, "after")
	before, _ := optInt(q, "before")
	n := h.cfg.PageSize
	rows, err := s.list(ctx, o, f, after, before, n+1)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	base := d.Params()
	more := len(rows) > n
	if more {
		if before > 0 {
			rows = rows[1:]
		} else {
			rows = rows[:n]
		}
	}
	d.Rows = rows
	if len(rows) > 0 {
		if more || before > 0 {
			d.Next = link("messages", append(base, "after", rows[len(rows)-1].ID)...)
		}
		if after > 0 || (before > 0 && more) {
			d.Prev = link("messages", append(base, "before", rows[0].ID)...)
		}
	}
	if after > 0 || before > 0 {
		d.First = link("messages", base...)
	}
	h.render(w, r, http.StatusOK, "messages", "Messages of "+o, false, d)
}

type messageData struct {
	Instance string
	Msg      message
	Kind     string // JSON, text, binary
	Body     string
	Cut      bool
	TraceID  string
	Headers  [][2]string
	Group    []row
}

const shownPayload = 1 << 20

func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	s, o, _, ok := h.picked(w, r, q)
	if !ok {
		return
	}
	id, err := optInt(q, "id")
	if err != nil || id == 0 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("a message ID is needed (id=…)"))
		return
	}
	m, found, err := s.message(ctx, o, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if !found {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no message %d in outbox %q (delivered and deleted, discarded, or never there)", id, o))
		return
	}
	d := messageData{Instance: s.name, Msg: m}
	d.Kind, d.Body, d.Cut = formatPayload(m.Payload)
	for _, k := range sortedKeys(m.Headers) {
		d.Headers = append(d.Headers, [2]string{k, m.Headers[k]})
	}
	d.TraceID = traceID(m.Headers["traceparent"])
	if d.Group, err = s.groupWaiting(ctx, m, 20); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.render(w, r, http.StatusOK, "message", fmt.Sprintf("Message %d", id), false, d)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// formatPayload shows a payload as indented JSON when it is JSON, as text when it is
// printable UTF-8, and as a hex dump otherwise; at most shownPayload bytes of it.
func formatPayload(p []byte) (kind, body string, cut bool) {
	if json.Valid(p) && len(p) <= shownPayload {
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") == nil {
			return "JSON", b.String(), false
		}
	}
	if len(p) > shownPayload {
		p, cut = cutRune(p[:shownPayload]), true
	}
	if utf8.Valid(p) && !strings.ContainsFunc(string(p), func(r rune) bool {
		return unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t'
	}) {
		return "text", string(p), cut
	}
	return "binary (hex)", hex.Dump(p), cut
}

// cutRune drops the bytes at the end of b that start a UTF-8 character without its
// end: b is the start of something longer.
func cutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// traceID reads the trace ID of a W3C traceparent header ("" when it is not one).
func traceID(tp string) string {
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[1]) != 32 {
		return ""
	}
	if _, err := hex.DecodeString(parts[1]); err != nil {
		return ""
	}
	return parts[1]
}
