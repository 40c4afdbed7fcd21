package sqs_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
	"github.com/outboxer-go/outboxer/sinktest"
)

// endpoint is the emulator's address, set by TestMain; "" when it could not start
// (startErr says why).
var (
	endpoint string
	startErr error
)

// TestMain starts the SQS emulator for the tests, and stops it after them.
func TestMain(m *testing.M) {
	var stop func()
	endpoint, stop, startErr = dbtest.StartSQSEmulator()
	code := m.Run()
	if stop != nil {
		stop()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func needEmulator(t testing.TB) {
	t.Helper()
	dbtest.NeedSQSEmulator(t, startErr)
}

// newClient returns a client for the endpoint; retries are off so that injected
// failures reach the relay.
func newClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
		RetryMaxAttempts: 1,
	})
}

var queueSeq atomic.Int64

// newQueue creates a queue of its own for t.
func newQueue(t testing.TB, fifo bool) string {
	t.Helper()
	return newQueueWith(t, fifo, nil)
}

// newQueueWith creates a queue of its own for t with the given attributes.
func newQueueWith(t testing.TB, fifo bool, attrs map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("q%d-%d", time.Now().UnixNano(), queueSeq.Add(1))
	attrs = maps.Clone(attrs)
	if attrs == nil {
		attrs = map[string]string{}
	}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := newClient(endpoint).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	return aws.ToString(out.QueueUrl)
}

// proxy stands between the relay and the emulator: it can refuse the next sends with
// an SQS server error, or go down (refuse connections) and come back on the same port.
type proxy struct {
	addr    string
	handler http.Handler
	failing atomic.Int64

	mu  sync.Mutex
	srv *http.Server
	wg  sync.WaitGroup
}

func newProxy(t testing.TB) *proxy {
	t.Helper()
	target, _ := url.Parse(endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &proxy{}
	p.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch" && p.takeFailure() {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#InternalError","message":"injected failure"}`))
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) takeFailure() bool {
	for {
		n := p.failing.Load()
		if n <= 0 {
			return false
		}
		if p.failing.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.srv = &http.Server{Handler: p.handler, ReadHeaderTimeout: 10 * time.Second}
	srv := p.srv
	p.wg.Add(1)
	go func() { defer p.wg.Done(); _ = srv.Serve(ln) }()
}

// stop closes the listener and every connection: the broker is unreachable.
func (p *proxy) stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		p.wg.Wait()
	}
}

// start listens again on the same port.
func (p *proxy) start(t testing.TB) {
	var ln net.Listener
	var err error
	for range 50 { // the port was ours a moment ago; give the kernel a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("proxy: listening again on %s: %v", p.addr, err)
		return
	}
	p.serve(ln)
}

// reader receives from a queue, decodes and deletes what arrives.
type reader struct {
	mu   sync.Mutex
	cond *sync.Cond
	got  []sinktest.Received
	bad  error
}

func newReader(t testing.TB, queue string) *reader {
	t.Helper()
	client := newClient(endpoint)
	r := &reader{}
	r.cond = sync.NewCond(&r.mu)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// A short visibility timeout: a receive whose response is lost (seen under
			// -race: "deserialization failed ... use of closed network connection" with
			// status 200) leaves its messages in flight, and on a FIFO queue their
			// groups wait until it runs out; with the queue's default of 30 s a case
			// could not finish inside its minute.
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: &queue, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 5,
				MessageAttributeNames: []string{"All"},
			})
			if err != nil {
				if ctx.Err() == nil {
					time.Sleep(50 * time.Millisecond) // back off on an emulator error
				}
				continue
			}
			var batch []sinktest.Received
			var bad error
			var del []types.DeleteMessageBatchRequestEntry
			for i, m := range out.Messages {
				rec, err := decode(m)
				if err != nil {
					bad = err
				}
				batch = append(batch, rec)
				del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			if len(del) > 0 {
				_, _ = client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &queue, Entries: del})
			}
			r.mu.Lock()
			r.got = append(r.got, batch...)
			if bad != nil && r.bad == nil {
				r.bad = bad
			}
			r.cond.Broadcast()
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// decode turns a received message back into the envelope's fields.
func decode(m types.Message) (sinktest.Received, error) {
	var rec sinktest.Received
	attr := func(name string) string {
		if v, ok := m.MessageAttributes[name]; ok {
			return aws.ToString(v.StringValue)
		}
		return ""
	}
	id, err := strconv.ParseInt(attr(outboxsqs.AttrID), 10, 64)
	if err != nil {
		return rec, fmt.Errorf("message without a valid %s: %w", outboxsqs.AttrID, err)
	}
	if key := attr(outboxsqs.AttrKey); key != core.MessageKey("", core.DefaultTable, id) {
		return rec, fmt.Errorf("message %d: %s is %q, want core.MessageKey of the row", id, outboxsqs.AttrKey, key)
	}
	rec.ID, rec.Type, rec.Outbox, rec.GroupKey = id, attr(outboxsqs.AttrType), attr(outboxsqs.AttrOutbox), attr(outboxsqs.AttrGroupKey)
	rec.Payload = []byte(aws.ToString(m.Body))
	if attr(outboxsqs.AttrEncoding) == "base64" {
		if rec.Payload, err = base64.StdEncoding.DecodeString(aws.ToString(m.Body)); err != nil {
			return rec, err
		}
	}
	if js := attr(outboxsqs.AttrHeaders); js != "" {
		if err := json.Unmarshal([]byte(js), &rec.Headers); err != nil {
			return rec, err
		}
	}
	for name, v := range m.MessageAttributes {
		switch name {
		case outboxsqs.AttrID, outboxsqs.AttrType, outboxsqs.AttrOutbox, outboxsqs.AttrGroupKey, outboxsqs.AttrEncoding, outboxsqs.AttrHeaders, outboxsqs.AttrKey:
			continue
		}
		if rec.Headers == nil {
			rec.Headers = map[string]string{}
		}
		rec.Headers[name] = aws.ToString(v.StringValue)
	}
	return rec, nil
}

func (r *reader) Read(ctx context.Context, n int) ([]sinktest.Received, error) {
	stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.got) < n && ctx.Err() == nil && r.bad == nil {
		r.cond.Wait()
	}
	out := append([]sinktest.Received(nil), r.got...)
	switch {
	case r.bad != nil:
		return out, r.bad
	case len(out) < n:
		return out, ctx.Err()
	}
	return out, nil
}
