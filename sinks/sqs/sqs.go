package sqs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// The message attributes the relay sets, besides the message's own headers.
const (
	AttrID       = "outboxer-id"        // Number: the envelope's ID
	AttrType     = "outboxer-type"      // String: the envelope's Type
	AttrOutbox   = "outboxer-outbox"    // String: the outbox
	AttrGroupKey = "outboxer-group-key" // String: the group key; absent for unordered messages
	// AttrEncoding is "base64" when the body is the payload in standard base64, because
	// the payload is not text SQS can carry (binary, or characters SQS refuses).
	AttrEncoding = "outboxer-encoding"
	// AttrHeaders carries all the message's headers as one JSON object when they cannot
	// each be an attribute: more than fit beside the relay's own (SQS allows 10
	// attributes), a name SQS refuses as an attribute name, or an empty value.
	AttrHeaders = "outboxer-headers"
	// AttrKey (String) is the message key, core.MessageKey of Config.Source, the table
	// (Config.Table, core.DefaultTable when empty) and the ID: the same on every delivery
	// of a row, different for any other row. It is the key consumers deduplicate on (the
	// inbox package does; see Handler): SQS delivers at least once, and a message whose
	// visibility timeout runs out is received again.
	AttrKey = core.HeaderKey
)

const (
	// MaxBatchEntries is SendMessageBatch's limit.
	MaxBatchEntries = 10
	// DefaultMaxMessageBytes is SQS's classic message size limit (body and attributes),
	// also the limit of one SendMessageBatch request. Queues may allow up to 1 MiB.
	DefaultMaxMessageBytes = 256 << 10
	maxAttributes          = 10
)

// Config configures a Relay.
type Config struct {
	// Client sends the messages. Required. Its retryer retries throttling and server
	// errors within a delivery; the engine retries whatever still fails.
	Client *sqs.Client
	// QueueURL of the queue. Required. A URL ending in ".fifo" is a FIFO queue.
	QueueURL string

	// Ordering is the ordering of the outbox this relay serves (FIFO queues): with
	// core.OrderGroup (the default) the group key is the MessageGroupId; with
	// core.OrderTotal the outbox name is, so the whole outbox is one group. A message
	// without a group key, or any message with core.OrderNone, gets a group of its own,
	// so consumers may take it in parallel.
	Ordering core.Ordering
	// AllowUnordered accepts a standard (not FIFO) queue for an outbox whose Ordering
	// needs order. Standard queues keep no order and may deliver a message twice. New
	// refuses such a queue without it, and logs a warning with it.
	AllowUnordered bool

	// Table is the outbox table's name (Config.Table or OutboxConfig.Table). The
	// MessageDeduplicationId of a FIFO message is "<Table>:<ID>": IDs are unique per
	// table, so a batch delivered again after a crash is dropped by SQS within its
	// 5-minute deduplication window. When empty, the outbox name stands in for it, which
	// is as unique as long as no two tables feed one queue under the same outbox name.
	Table string

	// Source is a name of the outbox's database: it goes into each message's AttrKey with
	// the table. Set it when several databases' outboxes reach the same consumers, so
	// that no two rows share a key.
	Source string

	// MaxMessageBytes bounds one message (body and attributes) and one batch request.
	// A larger message is refused with core.Permanent. Default DefaultMaxMessageBytes;
	// at most 1 MiB, and not above the queue's MaximumMessageSize.
	MaxMessageBytes int

	// Logger receives the warning about standard queues. Default slog.Default().
	Logger *slog.Logger

	// CloudEvents, when set, sends every message as a CloudEvent: in the binary content
	// mode (ce_ message attributes) unless it says Structured. See CloudEvents.
	CloudEvents *CloudEvents
}

// Relay delivers messages to an SQS queue. Create it with New; it is safe for concurrent use.
type Relay struct {
	client   *sqs.Client
	url      string
	fifo     bool
	ordering core.Ordering
	table    string
	keyTable string // the table in AttrKey: Table or core.DefaultTable
	source   string
	maxBytes int
	ce       *cloudevents.Options // nil: plain messages
}

// New validates cfg and returns a relay. It does not call SQS.
func New(cfg Config) (*Relay, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("sqs: invalid Config.%s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Client == nil:
		return nil, bad("Client", "is required")
	case cfg.QueueURL == "":
		return nil, bad("QueueURL", "is required")
	case !strings.HasPrefix(cfg.QueueURL, "http://") && !strings.HasPrefix(cfg.QueueURL, "https://"):
		return nil, bad("QueueURL", "%q is not an http(s) URL", cfg.QueueURL)
	case cfg.Ordering != core.OrderGroup && cfg.Ordering != core.OrderTotal && cfg.Ordering != core.OrderNone:
		return nil, bad("Ordering", "unknown ordering %v", cfg.Ordering)
	case cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > 1<<20 || (cfg.MaxMessageBytes > 0 && cfg.MaxMessageBytes < 1024):
		return nil, bad("MaxMessageBytes", "must be between 1 KiB and 1 MiB, got %d", cfg.MaxMessageBytes)
	case cfg.Table != "" && !validID(cfg.Table):
		return nil, bad("Table", "%q has characters a deduplication ID cannot hold", cfg.Table)
	}
	ce, err := cfg.CloudEvents.options()
	if err != nil {
		return nil, fmt.Errorf("sqs: invalid Config.%w", err)
	}
	r := &Relay{
		client:   cfg.Client,
		url:      cfg.QueueURL,
		fifo:     strings.HasSuffix(cfg.QueueURL, ".fifo"),
		ordering: cfg.Ordering,
		table:    cfg.Table,
		keyTable: cmp.Or(cfg.Table, core.DefaultTable),
		source:   cfg.Source,
		maxBytes: cfg.MaxMessageBytes,
		ce:       ce,
	}
	if r.maxBytes == 0 {
		r.maxBytes = DefaultMaxMessageBytes
	}
	if !r.fifo && cfg.Ordering != core.OrderNone {
		if !cfg.AllowUnordered {
			return nil, bad("QueueURL", "%s is a standard queue, which keeps no order, but Ordering is %v: use a FIFO queue, set Ordering to core.OrderNone, or set AllowUnordered", cfg.QueueURL, cfg.Ordering)
		}
		logger := cfg.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("sqs: standard queue: messages may arrive out of order and more than once",
			"queue", cfg.QueueURL, "ordering", cfg.Ordering.String())
	}
	return r, nil
}

// errHeldBack is the cause for a message not sent because an earlier message of its
// group in the same batch failed.
var errHeldBack = errors.New("held back behind a failed message of its group")

// Deliver sends the batch with SendMessageBatch, in requests of at most 10 messages and
// MaxMessageBytes, one after the other in batch order. It returns nil when all were
// accepted, or a *core.PartialFailure naming each message SQS refused and each later
// message of a refused one's group, which is then not sent. Messages that can never be
// sent (too large, refused by SQS as invalid) fail with core.Permanent.
//
// SQS may take a later message of a group in the same request as a refused one. With
// the checks made before sending, only an internal SQS error on a single entry can do
// that; the relay then still names the later message, and it arrives twice.
func (r *Relay) Deliver(ctx context.Context, batch []core.Envelope) error {
	failed := map[int64]error{}
	blocked := map[string]bool{}
	fail := func(env core.Envelope, err error) {
		failed[env.ID] = err
		if env.GroupKey != "" && r.ordering != core.OrderNone && !errors.Is(err, core.ErrPermanent) {
			blocked[env.GroupKey] = true
		}
	}
	var (
		entries []types.SendMessageBatchRequestEntry
		envs    []core.Envelope
		size    int
	)
	send := func() {
		if len(entries) == 0 {
			return
		}
		r.send(ctx, entries, envs, fail)
		entries, envs, size = entries[:0], envs[:0], 0
	}
	for _, env := range batch {
		if env.GroupKey != "" && blocked[env.GroupKey] {
			failed[env.ID] = fmt.Errorf("sqs: message %d: %w", env.ID, errHeldBack)
			continue
		}
		if ctx.Err() != nil {
			fail(env, fmt.Errorf("sqs: message %d: %w", env.ID, ctx.Err()))
			continue
		}
		entry, n, err := r.entry(env, strconv.Itoa(len(entries)))
		if err != nil {
			fail(env, err)
			continue
		}
		if len(entries) == MaxBatchEntries || size+n > r.maxBytes {
			send()
			entry.Id = aws.String("0")
			if env.GroupKey != "" && blocked[env.GroupKey] {
				failed[env.ID] = fmt.Errorf("sqs: message %d: %w", env.ID, errHeldBack)
				continue
			}
		}
		entries, envs, size = append(entries, entry), append(envs, env), size+n
	}
	send()
	if len(failed) == 0 {
		return nil
	}
	// A later message of a refused one's group sent in the same request is not credited.
	held := map[string]bool{}
	for _, env := range batch {
		err, isFailed := failed[env.ID]
		switch {
		case env.GroupKey == "" || r.ordering == core.OrderNone:
		case held[env.GroupKey] && !isFailed:
			failed[env.ID] = fmt.Errorf("sqs: message %d: %w", env.ID, errHeldBack)
		case isFailed && !errors.Is(err, core.ErrPermanent):
			held[env.GroupKey] = true
		}
	}
	return &core.PartialFailure{Failed: failed}
}

// send makes one SendMessageBatch call and reports each failed entry through fail.
func (r *Relay) send(ctx context.Context, entries []types.SendMessageBatchRequestEntry, envs []core.Envelope, fail func(core.Envelope, error)) {
	out, err := r.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &r.url, Entries: entries})
	if err != nil {
		for _, env := range envs {
			fail(env, fmt.Errorf("sqs: message %d: SendMessageBatch: %w", env.ID, err))
		}
		return
	}
	ok := make([]bool, len(envs))
	for _, s := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(ok) {
			ok[i] = true
		}
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(envs) {
			continue
		}
		ok[i] = true // reported below
		e := fmt.Errorf("sqs: message %d refused: %s: %s", envs[i].ID, aws.ToString(f.Code), aws.ToString(f.Message))
		if f.SenderFault {
			e = core.Permanent(e)
		}
		fail(envs[i], e)
	}
	for i, done := range ok {
		if !done {
			fail(envs[i], fmt.Errorf("sqs: message %d: SendMessageBatch reported no result for it", envs[i].ID))
		}
	}
}

// entry builds env's batch entry and its size as SQS counts it, or refuses it.
func (r *Relay) entry(env core.Envelope, id string) (types.SendMessageBatchRequestEntry, int, error) {
	e := types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageAttributes: map[string]types.MessageAttributeValue{}}
	var err error
	if r.ce != nil {
		err = r.cloudEvent(&e, env)
	} else {
		err = r.plain(&e, env)
	}
	if err != nil {
		return e, 0, err
	}
	body := aws.ToString(e.MessageBody)
	if r.fifo {
		e.MessageDeduplicationId = aws.String(dedupID(r.table, env))
		e.MessageGroupId = aws.String(r.groupID(env))
	}
	size := len(body)
	for k, v := range e.MessageAttributes {
		size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
	}
	if size > r.maxBytes {
		return e, 0, core.Permanent(fmt.Errorf("sqs: message %d: %d bytes with its attributes (body %d bytes) is too large: MaxMessageBytes is %d", env.ID, size, len(body), r.maxBytes))
	}
	return e, size, nil
}

// plain sets the body and attributes of env's entry without CloudEvents.
func (r *Relay) plain(e *types.SendMessageBatchRequestEntry, env core.Envelope) error {
	attr := func(name, typ, value string) {
		e.MessageAttributes[name] = types.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(value)}
	}
	body := string(env.Payload)
	if !validText(body) {
		body = base64.StdEncoding.EncodeToString(env.Payload)
		attr(AttrEncoding, "String", "base64")
	}
	if body == "" {
		return core.Permanent(fmt.Errorf("sqs: message %d: the payload is empty, and SQS cannot carry an empty body", env.ID))
	}
	e.MessageBody = aws.String(body)
	attr(AttrID, "Number", strconv.FormatInt(env.ID, 10))
	attr(AttrKey, "String", core.MessageKey(r.source, r.keyTable, env.ID))
	if env.Type != "" {
		attr(AttrType, "String", env.Type)
	}
	if env.Outbox != "" {
		attr(AttrOutbox, "String", env.Outbox)
	}
	if env.GroupKey != "" {
		attr(AttrGroupKey, "String", env.GroupKey)
	}
	for _, v := range []string{env.Type, env.Outbox, env.GroupKey} {
		if !validText(v) && v != "" {
			return core.Permanent(fmt.Errorf("sqs: message %d: type, outbox or group key %q has characters SQS refuses", env.ID, v))
		}
	}
	if len(env.Headers) > 0 {
		separate := len(e.MessageAttributes)+len(env.Headers) <= maxAttributes
		for k, v := range env.Headers {
			if !validAttrName(k) || !validText(v) || v == "" {
				separate = false
			}
		}
		if separate {
			for _, k := range slices.Sorted(maps.Keys(env.Headers)) {
				attr(k, "String", env.Headers[k])
			}
		} else {
			js, err := json.Marshal(env.Headers)
			if err != nil {
				return core.Permanent(fmt.Errorf("sqs: message %d: encoding headers: %w", env.ID, err))
			}
			if !validText(string(js)) {
				return core.Permanent(fmt.Errorf("sqs: message %d: headers have characters SQS refuses", env.ID))
			}
			attr(AttrHeaders, "String", string(js))
		}
	}
	return nil
}

// groupID is the MessageGroupId of env on a FIFO queue.
func (r *Relay) groupID(env core.Envelope) string {
	switch {
	case r.ordering == core.OrderTotal:
		return safeID("outbox:" + env.Outbox)
	case r.ordering == core.OrderNone || env.GroupKey == "":
		return "message:" + dedupID(r.table, env) // a group of its own
	}
	return safeID(env.GroupKey)
}

// dedupID is "<table or outbox>:<id>", hashed if it does not fit SQS's rules.
func dedupID(table string, env core.Envelope) string {
	scope := table
	if scope == "" {
		scope = env.Outbox
	}
	return safeID(scope + ":" + strconv.FormatInt(env.ID, 10))
}

// safeID returns s if SQS accepts it as a group or deduplication ID (at most 128
// characters of letters, digits and punctuation), or else the hex SHA-256 of s.
func safeID(s string) string {
	if validID(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~]{1,128}$`)

func validID(s string) bool { return idRE.MatchString(s) }

var attrNameRE = regexp.MustCompile(`^[A-Za-z0-9_\-.]{1,256}$`)

// validAttrName: SQS attribute names are letters, digits, '_', '-' and '.', not starting
// or ending with '.', without "..", and not starting with "AWS." or "Amazon.".
func validAttrName(s string) bool {
	lower := strings.ToLower(s)
	return attrNameRE.MatchString(s) && !strings.HasPrefix(s, ".") && !strings.HasSuffix(s, ".") &&
		!strings.Contains(s, "..") && !strings.HasPrefix(lower, "aws.") && !strings.HasPrefix(lower, "amazon.") &&
		!strings.HasPrefix(lower, "outboxer-")
}

// validText: SQS bodies and string attributes are Unicode of #x9, #xA, #xD, #x20-#xD7FF,
// #xE000-#xFFFD and #x10000-#x10FFFF.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		switch {
		case c == 0x9 || c == 0xA || c == 0xD:
		case c >= 0x20 && c <= 0xD7FF:
		case c >= 0xE000 && c <= 0xFFFD:
		case c >= 0x10000 && c <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}
