package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

func row(tw *tabwriter.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(tw, strings.Join(parts, "\t"))
}

// message is an envelope as the CLI prints it in JSON.
type message struct {
	ID            int64             `json:"id"`
	Outbox        string            `json:"outbox"`
	Type          string            `json:"type"`
	GroupKey      string            `json:"group_key"`
	Partition     int               `json:"partition"`
	State         string            `json:"state"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"last_error,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	AvailableAt   time.Time         `json:"available_at"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`        // when it is JSON
	PayloadText   *string           `json:"payload_text,omitempty"`   // when it is other text
	PayloadBase64 *string           `json:"payload_base64,omitempty"` // when it is binary
}

func toMessage(e core.Envelope) message {
	m := message{
		ID: e.ID, Outbox: e.Outbox, Type: e.Type, GroupKey: e.GroupKey, Partition: e.Partition,
		State: e.State.String(), Attempts: e.Attempts, LastError: e.LastError,
		CreatedAt: e.CreatedAt.UTC(), AvailableAt: e.AvailableAt.UTC(), Headers: e.Headers,
	}
	switch {
	case json.Valid(e.Payload):
		m.Payload = json.RawMessage(e.Payload)
	case utf8.Valid(e.Payload):
		s := string(e.Payload)
		m.PayloadText = &s
	default:
		s := base64.StdEncoding.EncodeToString(e.Payload)
		m.PayloadBase64 = &s
	}
	return m
}

// preview shortens text for a table cell.
func preview(b []byte, n int) string {
	s := string(b)
	if !utf8.ValidString(s) {
		return fmt.Sprintf("<%d bytes>", len(b))
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age prints a duration rounded for people.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// idRanges prints sorted IDs compactly: 1-4, 7, 9-10.
func idRanges(ids []int64) string {
	if len(ids) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(ids[i], 10))
		if j > i {
			b.WriteString("-" + strconv.FormatInt(ids[j], 10))
		}
		i = j + 1
	}
	return b.String()
}

func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}
