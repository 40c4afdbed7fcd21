package sqs_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxer-go/outboxer/core"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// A relay for a FIFO queue serving an outbox kept in group order. Build the SQS client
// as usual (here for a local endpoint with static credentials; in production from
// config.LoadDefaultConfig) and put the relay in core.OutboxConfig.Relay.
func Example() {
	client := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:4566"),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
	relay, err := outboxsqs.New(outboxsqs.Config{
		Client:   client,
		QueueURL: "http://127.0.0.1:4566/000000000000/orders.fifo",
		Ordering: core.OrderGroup,   // the outbox's Ordering
		Table:    core.DefaultTable, // the outbox's table: deduplication IDs are "<table>:<id>"
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = core.OutboxConfig{Relay: relay, Ordering: core.OrderGroup}
}
