package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// handInsert is the INSERT a service not written in Go writes, per dialect: only the
// outbox, type, group key, payload and headers; the table's defaults do the rest.
var handInsert = map[core.Dialect]string{
	core.Postgres: `INSERT INTO outboxer_messages (outbox, type, group_key, payload, headers)
		VALUES ('orders', 'order.created', $1, convert_to($2, 'UTF8'), '{"source":"php"}')`,
	core.MySQL: `INSERT INTO outboxer_messages (outbox, type, group_key, payload, headers)
		VALUES ('orders', 'order.created', ?, ?, '{"source":"php"}')`,
	core.SQLite: `INSERT INTO outboxer_messages (outbox, type, group_key, payload, headers)
		VALUES ('orders', 'order.created', ?, CAST(? AS BLOB), '{"source":"php"}')`,
}

// lockedBuffer collects a process's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// relayProc is a running `outboxer relay`.
type relayProc struct {
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

func startRelay(t *testing.T, args ...string) *relayProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"relay"}, args...)...)
	cmd.Env = append(os.Environ(), "OUTBOXER_DSN=")
	p := &relayProc{cmd: cmd, lines: make(chan string, 1000), stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// next returns the next stdout line of the relay, failing after timeout.
func (p *relayProc) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatalf("relay exited: %v\nstderr:\n%s", p.err, p.stderr)
		}
		return line
	case <-time.After(timeout):
		t.Fatalf("no message from the relay within %v\nstderr:\n%s", timeout, p.stderr)
	}
	return ""
}

// stop sends SIGTERM and returns the exit code.
func (p *relayProc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not stop within 30s of SIGTERM\nstderr:\n%s", p.stderr)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// waitFor polls cond until it holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// relayConfigFile writes a relay configuration for the orders outbox with the given
// sink, in YAML, or in TOML when toml is set.
func relayConfigFile(t *testing.T, dsn string, toml bool, sink string) string {
	t.Helper()
	if toml {
		return writeFile(t, "relay.toml", fmt.Sprintf(`lease_duration = "2s"
shutdown_timeout = "5s"

[database]
dsn = %q

[outboxes.orders]
ordering = "group"
partitions = 2
batch_size = 10
poll_interval = "50ms"
max_attempts = 3
backoff = { min = "100ms", max = "1s" }

[outboxes.orders.sink]
%s
`, dsn, sink))
	}
	return writeFile(t, "relay.yaml", fmt.Sprintf(`lease_duration: 2s
shutdown_timeout: 5s
database:
  dsn: %q
outboxes:
  orders:
    ordering: group
    partitions: 2
    batch_size: 10
    poll_interval: 50ms
    max_attempts: 3
    backoff: {min: 100ms, max: 1s}
    sink:
%s
`, dsn, sink))
}

func TestRelayDeliversHandWrittenRows(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		dsn := cliDSN(t, db)
		mustRun(t, "migrate", "up", "--dsn", dsn)
		useTOML := db.Dialect == core.SQLite
		sink := "      type: stdout"
		if useTOML {
			sink = `type = "stdout"`
		}
		cfg := relayConfigFile(t, dsn, useTOML, sink)
		p := startRelay(t, "--config", cfg)

		// Rows written by hand, as a service not written in Go writes them.
		ctx := context.Background()
		type row struct{ key, payload string }
		rows := []row{{"order:1", `{"n":1}`}, {"order:2", `{"n":2}`}, {"order:1", `{"n":3}`}, {"order:1", `{"n":4}`}}
		for _, r := range rows {
			if _, err := db.ExecContext(ctx, handInsert[db.Dialect], r.key, r.payload); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string][]message{}
		var last int64
		for range rows {
			var m message
			line := p.next(t, 20*time.Second)
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("relay printed %q: %v", line, err)
			}
			if m.Outbox != "orders" || m.Type != "order.created" || m.Headers["source"] != "php" || m.Partition != 0 {
				t.Fatalf("relayed %+v", m)
			}
			if m.ID <= last {
				t.Fatalf("message %d relayed after %d", m.ID, last)
			}
			last = m.ID
			got[m.GroupKey] = append(got[m.GroupKey], m)
		}
		var order1 []string
		for _, m := range got["order:1"] {
			order1 = append(order1, compact(t, m.Payload))
		}
		if strings.Join(order1, " ") != `{"n":1} {"n":3} {"n":4}` || len(got["order:2"]) != 1 {
			t.Fatalf("relayed out of order or wrong: %v", got)
		}

		// While it runs, status shows its process owning the partitions.
		pid := strconv.Itoa(p.cmd.Process.Pid)
		waitFor(t, 10*time.Second, "the relay to own both partitions", func() bool {
			st := decode[[]statusJSON](t, mustRun(t, "status", "--dsn", dsn, "--json"))
			if len(st) != 1 || len(st[0].Partitions) != 2 {
				return false
			}
			for _, part := range st[0].Partitions {
				if !part.LeaseHeld || !strings.Contains(part.Owner, "/"+pid+"/") || part.LeaseExpires == nil {
					return false
				}
			}
			return st[0].Backlog == 0 && len(st[0].Unowned) == 0 && len(st[0].Owners) == 1
		})
		// ... and lists it as the one live node, holding both, named by the relay's name.
		st := decode[[]statusJSON](t, mustRun(t, "status", "--dsn", dsn, "--json"))
		if n := st[0].Nodes; len(n) != 1 || !strings.HasPrefix(n[0].Node, "outboxer-relay@") || !strings.Contains(n[0].Node, "/"+pid+"/") ||
			!slices.Equal(n[0].Partitions, []int{0, 1}) || n[0].Share != 2 || n[0].LastHeartbeat.IsZero() ||
			n[0].Joined.IsZero() || n[0].Joined.After(n[0].LastHeartbeat) {
			t.Fatalf("status nodes: %+v", n)
		}
		if out := mustRun(t, "status", "--dsn", dsn).stdout; !strings.Contains(out, "JOINED") || !strings.Contains(out, "LAST HEARTBEAT") || !strings.Contains(out, st[0].Nodes[0].Node) {
			t.Fatalf("status does not list the node:\n%s", out)
		}

		if code := p.stop(t); code != 0 {
			t.Fatalf("relay exit code %d after SIGTERM\nstderr:\n%s", code, p.stderr)
		}
		if !strings.Contains(p.stderr.String(), "partitions released") {
			t.Fatalf("relay did not log its graceful stop:\n%s", p.stderr)
		}
		// The partitions were released on the way out, and every row was delivered.
		st = decode[[]statusJSON](t, mustRun(t, "status", "--dsn", dsn, "--json"))
		for _, part := range st[0].Partitions {
			if part.LeaseHeld || part.Owner != "" {
				t.Fatalf("partition %d still owned after the relay stopped: %+v", part.Partition, part)
			}
		}
		if c := decode[[]countsJSON](t, mustRun(t, "counts", "--dsn", dsn, "--json")); c[0].Pending != 0 {
			t.Fatalf("after the relay: %+v", c)
		}
	})
}

func TestRelayToRiver(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx := context.Background()
	migrator, err := rivermigrate.New(riverdatabasesql.New(db.DB), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("River's migrations: %v", err)
	}
	mustRun(t, "migrate", "up", "--dsn", db.DSN)
	cfg := relayConfigFile(t, db.DSN, false, "      type: river\n      queue: orders\n      priority: 2")
	p := startRelay(t, "--config", cfg)
	for i := range 3 {
		if _, err := db.ExecContext(ctx, handInsert[core.Postgres], "order:7", fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	type job struct {
		kind, queue string
		priority    int
		args        string
	}
	var jobs []job
	waitFor(t, 20*time.Second, "three River jobs", func() bool {
		jobs = nil
		rows, err := db.QueryContext(ctx, `SELECT kind, queue, priority, args::text FROM river_job ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var j job
			if err := rows.Scan(&j.kind, &j.queue, &j.priority, &j.args); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, j)
		}
		return len(jobs) >= 3
	})
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3", len(jobs))
	}
	for i, j := range jobs {
		var args struct {
			Outbox   string          `json:"outbox"`
			GroupKey string          `json:"group_key"`
			Payload  json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal([]byte(j.args), &args); err != nil {
			t.Fatal(err)
		}
		if j.kind != "outboxer_message" || j.queue != "orders" || j.priority != 2 || args.Outbox != "orders" ||
			args.GroupKey != "order:7" || compact(t, args.Payload) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("job %d: %+v (args %s)", i, j, j.args)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("relay exit code %d\nstderr:\n%s", code, p.stderr)
	}
	var left int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outboxer_messages`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d outbox rows left, %v", left, err)
	}
}

func TestRelayConfigErrors(t *testing.T) {
	// 127.0.0.1:1 answers nothing: a test passing with it shows that nothing connected.
	const dsn = "postgres://postgres@127.0.0.1:1/test"
	cases := []struct {
		name, sink, want string
	}{
		{"unknown sink type", "      type: nats", `sink.type "nats" is not supported (supported: amqp, kafka, river, sqs, stdout)`},
		{"missing sink", "      {}", "sink.type is required"},
		{"field of another sink", "      type: kafka\n      brokers: [\"127.0.0.1:9092\"]\n      topic: t\n      queue_url: x", "sink.queue_url does not apply to sink type kafka"},
		{"amqp without topic", "      type: amqp\n      url: amqp://127.0.0.1", "sink type amqp needs topic"},
		{"unset variable", "      type: amqp\n      url: ${OUTBOXER_TEST_UNSET_VAR}\n      topic: t", "OUTBOXER_TEST_UNSET_VAR, which is not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := relayConfigFile(t, dsn, false, tc.sink)
			wantFailure(t, cli(t, "", "relay", "--config", cfg), exitUsage, tc.want)
		})
	}
	t.Run("core options", func(t *testing.T) {
		cfg := writeFile(t, "relay.yaml", "database: {dsn: \""+dsn+"\"}\noutboxes:\n  orders:\n    ordering: total\n    partitions: 4\n    sink: {type: stdout}\n")
		wantFailure(t, cli(t, "", "relay", "--config", cfg), exitUsage, `Outboxes["orders"].Partitions: must be 1 with OrderTotal`)
		cfg = writeFile(t, "relay.yaml", "database: {dsn: \""+dsn+"\"}\nmax_partitions: -2\noutboxes:\n  orders:\n    sink: {type: stdout}\n")
		wantFailure(t, cli(t, "", "relay", "--config", cfg), exitUsage, `MaxPartitions: must be 0 (fair share), a positive cap or AllPartitions (-1), got -2`)
		cfg = writeFile(t, "relay.yaml", "database: {dsn: \""+dsn+"\"}\nmax_partitions: 2\noutboxes:\n  orders:\n    sink: {type: stdout}\n")
		if r := mustRun(t, "relay", "--config", cfg, "--check"); !strings.Contains(r.stdout, "is valid") {
			t.Fatalf("max_partitions 2 --check: %v", r)
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		cfg := writeFile(t, "relay.yaml", "database: {dsn: \""+dsn+"\"}\noutboxes:\n  orders:\n    batch: 5\n    sink: {type: stdout}\n")
		wantFailure(t, cli(t, "", "relay", "--config", cfg), exitUsage, "field batch not found")
		cfg = writeFile(t, "relay.toml", "[database]\ndsn = \""+dsn+"\"\n[outboxes.orders]\nbatch = 5\n[outboxes.orders.sink]\ntype = \"stdout\"\n")
		wantFailure(t, cli(t, "", "relay", "--config", cfg), exitUsage, "unknown key outboxes.orders.batch")
	})
	t.Run("bad table", func(t *testing.T) {
		cfg := writeFile(t, "relay.yaml", "database: {dsn: \""+dsn+"\", table: \"x; DROP TABLE y\"}\noutboxes:\n  orders:\n    sink: {type: stdout}\n")
		wantFailure(t, cli(t, "", "relay", "--config", cfg), exitUsage, "invalid --table")
	})
	t.Run("check", func(t *testing.T) {
		cfg := relayConfigFile(t, dsn, false, "      type: stdout")
		r := mustRun(t, "relay", "--config", cfg, "--check")
		if !strings.HasPrefix(r.stdout, "configuration "+cfg+" is valid: 1 outbox(es)") {
			t.Fatalf("--check: %v", r)
		}
	})
	t.Run("unreachable database", func(t *testing.T) {
		cfg := relayConfigFile(t, dsn, false, "      type: stdout")
		wantFailure(t, cli(t, "", "relay", "--config", cfg), exitRuntime, "cannot reach the PostgreSQL database")
	})
	wantFailure(t, cli(t, "", "relay"), exitUsage, "--config is required")
	wantFailure(t, cli(t, "", "relay", "--config", writeFile(t, "relay.ini", "")), exitUsage, "want a .yaml, .yml or .toml file")
	wantFailure(t, cli(t, "", "relay", "--config", writeFile(t, "empty.yaml", "")), exitUsage, "configuration names no outboxes")
}

func TestRelayToKafka(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	db := dbtest.SQLite(t)
	dsn := cliDSN(t, db)
	mustRun(t, "migrate", "up", "--dsn", dsn)
	cfg := relayConfigFile(t, dsn, false, fmt.Sprintf("      type: kafka\n      brokers: [%q]\n      topic: orders", brokers[0]))
	p := startRelay(t, "--config", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := db.ExecContext(ctx, handInsert[core.SQLite], "order:9", fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []*kgo.Record
	for len(got) < 3 {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of 3 records within the time limit\nrelay stderr:\n%s", len(got), p.stderr)
		}
		got = append(got, fetches.Records()...)
	}
	if len(got) != 3 {
		t.Fatalf("%d records, want 3", len(got))
	}
	for i, r := range got {
		if string(r.Key) != "order:9" || string(r.Value) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("record %d: key %q value %q", i, r.Key, r.Value)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("relay exit code %d\nstderr:\n%s", code, p.stderr)
	}
}

func TestRelayToRabbitMQ(t *testing.T) {
	const uri = "amqp://guest:guest@127.0.0.1:5672/"
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:5672", 3*time.Second); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("RabbitMQ is unavailable in CI: %v", err)
		}
		t.Skipf("RabbitMQ is unavailable: %v", err)
	} else {
		conn.Close()
	}
	queue := fmt.Sprintf("outboxer_cli_test_%d", time.Now().UnixNano())
	amqpCfg := amqp.NewNonDurableQueueConfig(uri)
	sub, err := amqp.NewSubscriber(amqpCfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(queue); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}

	db := dbtest.MariaDB(t)
	dsn := cliDSN(t, db)
	mustRun(t, "migrate", "up", "--dsn", dsn)
	cfg := relayConfigFile(t, dsn, false, fmt.Sprintf("      type: amqp\n      url: %s\n      topic: %s\n      durable: false", uri, queue))
	p := startRelay(t, "--config", cfg)
	for i := range 3 {
		if _, err := db.ExecContext(ctx, handInsert[core.MySQL], "order:5", fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		select {
		case m := <-msgs:
			m.Ack()
			if string(m.Payload) != fmt.Sprintf(`{"n":%d}`, i) || m.Metadata.Get("outboxer_group_key") != "order:5" ||
				m.Metadata.Get("source") != "php" {
				t.Fatalf("message %d: %s %v", i, m.Payload, m.Metadata)
			}
		case <-ctx.Done():
			t.Fatalf("%d of 3 messages within the time limit\nrelay stderr:\n%s", i, p.stderr)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("relay exit code %d\nstderr:\n%s", code, p.stderr)
	}
}

// TestRelayToSQS: `outboxer relay` with an sqs sink on a FIFO queue of the emulator, the
// AWS credentials taken from the environment as on a server: rows written by hand in two
// groups arrive in order within each group, with the group key as MessageGroupId and the
// row's headers and the relay's attributes as message attributes.
func TestRelayToSQS(t *testing.T) {
	endpoint := dbtest.SQSEmulator(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"))
	if err != nil {
		t.Fatal(err)
	}
	client := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	created, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	queue := aws.ToString(created.QueueUrl)

	db := dbtest.Postgres(t)
	dsn := cliDSN(t, db)
	mustRun(t, "migrate", "up", "--dsn", dsn)
	cfg := relayConfigFile(t, dsn, false, fmt.Sprintf("      type: sqs\n      queue_url: %s\n      region: us-east-1\n      endpoint: %s", queue, endpoint))
	p := startRelay(t, "--config", cfg)
	const perGroup = 5
	for i := range perGroup {
		for _, g := range []string{"order:1", "order:2"} {
			if _, err := db.ExecContext(ctx, handInsert[core.Postgres], g, fmt.Sprintf(`{"n":%d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string][]string{} // MessageGroupId → bodies in arrival order
	for n := 0; n < 2*perGroup; {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
		if err != nil {
			t.Fatalf("ReceiveMessage after %d of %d messages: %v\nrelay stderr:\n%s", n, 2*perGroup, err, p.stderr)
		}
		for _, m := range out.Messages {
			group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
			if attr("outboxer-group-key") != group || attr("outboxer-type") != "order.created" ||
				attr("outboxer-outbox") != "orders" || attr("source") != "php" {
				t.Errorf("message in group %q: attributes %v", group, m.MessageAttributes)
			}
			got[group] = append(got[group], aws.ToString(m.Body))
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &queue, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	for _, g := range []string{"order:1", "order:2"} {
		var want []string
		for i := range perGroup {
			want = append(want, fmt.Sprintf(`{"n":%d}`, i))
		}
		if !slices.Equal(got[g], want) {
			t.Errorf("group %s received %q, want %q", g, got[g], want)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("relay exit code %d\nstderr:\n%s", code, p.stderr)
	}
}
