// SQS: orders on embedded SQLite, their events relayed to an SQS FIFO queue.
//
// It needs an SQS endpoint: by default the emulator the project's tests use, started
// from the repository root with
//
//	npm ci && FAUXQS_PORT=4566 FAUXQS_HOST=127.0.0.1 node node_modules/fauxqs/dist/cli.js
//
// then
//
//	go run ./examples/sqs
//
// Set SQS_ENDPOINT to use another endpoint. The program creates a FIFO queue, publishes
// three events in the transactions of their orders, drains the outbox through the relay
// (manual mode), and receives the messages back in order.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// OrderPlaced is the event; the group key (the MessageGroupId) keeps one order's events
// in sequence.
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string      { return "orders" }
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }
func (e OrderPlaced) GroupKey() string  { return fmt.Sprintf("order:%d", e.OrderID) }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, cmp.Or(os.Getenv("SQS_ENDPOINT"), "http://127.0.0.1:4566")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, endpoint string) error {
	client := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "example", SecretAccessKey: "example"}, nil
		}),
	})
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(fmt.Sprintf("orders-%d.fifo", time.Now().UnixNano())),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		return fmt.Errorf("creating the queue at %s (is the emulator running?): %w", endpoint, err)
	}
	defer client.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})

	dir, err := os.MkdirTemp("", "outboxer-sqs")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL NOT NULL)`); err != nil {
		return err
	}
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}

	relay, err := outboxsqs.New(outboxsqs.Config{
		Client:   client,
		QueueURL: aws.ToString(q.QueueUrl),
		Ordering: core.OrderGroup,
		Table:    core.DefaultTable,
	})
	if err != nil {
		return err
	}
	ob, err := core.New(core.Config{
		DB:       db,
		Manual:   true, // deliver with Drain below; in a service, call Run instead
		Logger:   slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, Ordering: core.OrderGroup}},
	})
	if err != nil {
		return err
	}
	for _, o := range []OrderPlaced{{1, 25.50}, {1, 30.00}, {2, 12.75}} {
		err := ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO orders (id, total) VALUES (?, ?)`, o.OrderID, o.Total); err != nil {
				return err
			}
			_, err := p.Publish(ctx, o)
			return err
		})
		if err != nil {
			return err
		}
	}
	res, err := ob.Drain(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "delivered %d, failed %d, dead %d\n", res.Delivered, res.Failed, res.Dead)

	type received struct{ id, group, typ, body string }
	var got []received
	for len(got) < res.Delivered {
		msgs, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return err
		}
		for _, m := range msgs.Messages {
			attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
			got = append(got, received{attr(outboxsqs.AttrID), attr(outboxsqs.AttrGroupKey), attr(outboxsqs.AttrType), aws.ToString(m.Body)})
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
	}
	// A FIFO queue keeps order within a message group only: print group by group, each in
	// the order it was received, so that the output is the same on every run.
	slices.SortStableFunc(got, func(a, b received) int { return strings.Compare(a.group, b.group) })
	for _, r := range got {
		fmt.Fprintf(out, "id %s group %s type %s body %s\n", r.id, r.group, r.typ, r.body)
	}
	return nil
}
