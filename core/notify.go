package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// listen holds one connection in LISTEN on the notification channel of every table and
// wakes the workers of the outboxes named in each notification, until ctx is done. It
// reconnects when the connection is lost, and wakes every worker after reconnecting, as
// notifications may have been missed meanwhile.
func (o *Outboxer) listen(ctx context.Context) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := o.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		o.cfg.Logger.Warn("outboxer: notification listener lost its connection", "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func (o *Outboxer) listenOnce(ctx context.Context) error {
	conn, err := o.cfg.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	channels := map[string]bool{}
	for _, s := range o.tables {
		if !channels[s.NotifyChannel] {
			channels[s.NotifyChannel] = true
			if _, err := conn.ExecContext(ctx, `LISTEN "`+strings.ReplaceAll(s.NotifyChannel, `"`, `""`)+`"`); err != nil {
				return err
			}
		}
	}
	// Listening: anything committed before now was missed.
	for _, ob := range o.outboxes {
		ob.signalAll(wakeNow)
	}
	return conn.Raw(func(driverConn any) error {
		wait, err := notificationWaiter(driverConn)
		if err != nil {
			return err
		}
		for {
			payload, err := wait(ctx)
			if err != nil {
				return err
			}
			o.notified(payload)
		}
	})
}

// notified wakes the workers a notification names ("outbox:p1,p2", or "outbox" for all
// its partitions), or every worker when it names nothing this instance knows.
func (o *Outboxer) notified(payload string) {
	if name, ok := strings.CutSuffix(payload, ":"+nodesPayload); ok {
		if _, ok := o.outboxes[name]; ok {
			// Partitions were given back, or a node left: read the membership again and
			// offer the free partitions to the idle workers now.
			select {
			case o.refresh <- struct{}{}:
			default:
			}
			return
		}
	}
	name, parts := splitPayload(payload)
	if ob, ok := o.outboxes[name]; ok {
		if parts == "" {
			ob.signalAll(wakeNow)
			return
		}
		for _, f := range strings.Split(parts, ",") {
			if p, err := strconv.Atoi(f); err == nil && p >= 0 && p < len(ob.wake) {
				ob.signal(p, wakeNow)
			} else {
				ob.signalAll(wakeNow) // another node knows other partitions: wake them all
				return
			}
		}
		return
	}
	for _, ob := range o.outboxes {
		ob.signalAll(wakeNow)
	}
}

// splitPayload splits a notification into the outbox name and the partition list. The
// name may hold colons too: the list is what follows the last one, when it is a list of
// numbers.
func splitPayload(payload string) (name, parts string) {
	i := strings.LastIndexByte(payload, ':')
	if i < 0 {
		return payload, ""
	}
	parts = payload[i+1:]
	for _, f := range strings.Split(parts, ",") {
		if _, err := strconv.Atoi(f); err != nil {
			return payload, "" // a name ending in a colon and something else
		}
	}
	return payload[:i], parts
}

// notificationWaiter returns a function waiting for the next notification on a pgx
// connection (github.com/jackc/pgx/v5/stdlib), reached through reflection so that the
// core does not depend on the driver.
func notificationWaiter(driverConn any) (func(context.Context) (string, error), error) {
	get := reflect.ValueOf(driverConn).MethodByName("Conn")
	if !get.IsValid() || get.Type().NumIn() != 0 || get.Type().NumOut() != 1 {
		return nil, fmt.Errorf("Notify needs the pgx driver (github.com/jackc/pgx/v5/stdlib), got %T", driverConn)
	}
	pgxConn := get.Call(nil)[0]
	wait := pgxConn.MethodByName("WaitForNotification")
	if !wait.IsValid() {
		return nil, fmt.Errorf("Notify needs the pgx driver (github.com/jackc/pgx/v5/stdlib), got %T", driverConn)
	}
	return func(ctx context.Context) (string, error) {
		out := wait.Call([]reflect.Value{reflect.ValueOf(ctx)})
		if err, _ := out[1].Interface().(error); err != nil {
			return "", err
		}
		n := out[0]
		if n.Kind() == reflect.Pointer {
			if n.IsNil() {
				return "", errors.New("empty notification")
			}
			n = n.Elem()
		}
		return n.FieldByName("Payload").String(), nil
	}, nil
}
