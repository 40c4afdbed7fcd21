package sqs_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/inbox"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// A billing consumer of an SQS queue with an inbox: each message's handler runs in a
// transaction that claims the message's key (AttrKey) first, and the message is deleted
// after the commit; a message received again (the relay sent it twice, or its
// visibility timeout ran out) is deleted without running the handler.
// TestConsumerRunsEachMessageOnce runs this against the emulator.
func ExampleConsumer() {
	db, err := sql.Open("pgx", "postgres://billing@localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	// The queue's visibility timeout (30 s) × its redrive policy's maxReceiveCount (5)
	// must fit in the inbox's dedup window.
	if err := outboxsqs.CheckRedelivery(in, 30*time.Second, 5); err != nil {
		log.Fatal(err)
	}
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:4566")})
	consumer, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{
		Client:   client,
		QueueURL: "http://127.0.0.1:4566/000000000000/orders",
		Inbox:    in,
		Name:     "billing",
		Handler: func(ctx context.Context, tx *sql.Tx, m types.Message, _ inbox.Outcome) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_json) VALUES ($1)`, aws.ToString(m.Body))
			return err
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	go consumer.Run(context.Background()) // until its context ends
}

// A consumer of a queue that another producer sends to as well: its messages carry no
// outboxer-key, so the handler does not run for them. The OnForeign policy here
// copies such a message to a table and returns nil, so the consumer deletes it from
// the queue; without OnForeign the consumer would delete it with a warning
// (inbox.SkipForeign), and with inbox.StopOnForeign Run would stop at it.
// TestConsumerDeadLettersForeignMessage runs this against the emulator.
func ExampleConsumerConfig_onForeign() {
	db, err := sql.Open("pgx", "postgres://billing@localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:4566")})
	consumer, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{
		Client:   client,
		QueueURL: "http://127.0.0.1:4566/000000000000/orders",
		Inbox:    in,
		Name:     "billing",
		Handler: func(ctx context.Context, tx *sql.Tx, m types.Message, _ inbox.Outcome) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_json) VALUES ($1)`, aws.ToString(m.Body))
			return err
		},
		OnForeign: func(ctx context.Context, m inbox.ForeignMessage) error {
			_, err := db.ExecContext(ctx, `INSERT INTO dead_letters (message_id, body) VALUES ($1, $2)`, m.ID, m.Payload)
			return err // nil: the message is deleted; an error leaves it in the queue
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	go consumer.Run(context.Background())
}
