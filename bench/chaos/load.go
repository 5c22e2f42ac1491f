package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookd/hookd/internal/drain"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EventState is what the load generator knows of an event.
type EventState int

// Event states.
const (
	// StateUncertain: the commit (or the broker's acknowledgement) failed
	// in a way that does not tell whether it happened; delivering it is
	// allowed, losing it is not counted.
	StateUncertain EventState = iota
	// StateCommitted: the outbox transaction committed, or the broker
	// acknowledged the ingress record. It must be delivered or
	// dead-lettered.
	StateCommitted
	// StateRolledBack: the outbox transaction rolled back (on purpose or on
	// an error before COMMIT). It must never be delivered.
	StateRolledBack
)

// LoadConfig configures the load generator.
type LoadConfig struct {
	// Pool writes the outbox. Required when OutboxShare > 0.
	Pool *pgxpool.Pool
	// Kafka produces to EventsTopic. Required when OutboxShare < 1.
	Kafka       *kgo.Client
	EventsTopic string
	// Accounts the events belong to, chosen uniformly. Required.
	Accounts []string
	// Rate is events per second, both paths together (open loop: the
	// schedule does not wait for the system). Required.
	Rate float64
	// Total stops after this many events; 0 runs until ctx ends.
	Total int
	// OutboxShare is the share of batches written through the outbox.
	// Defaults to 0.5; negative means none.
	OutboxShare float64
	// BatchSize is events per outbox transaction or ingress batch.
	// Defaults to 5.
	BatchSize int
	// RollbackEvery rolls back one outbox transaction in N. 0 never.
	RollbackEvery int
	// InvalidEvery produces one invalid envelope every N ingress batches.
	// 0 never.
	InvalidEvery int
	// Workers run batches concurrently. Defaults to 8.
	Workers int
	// Prefix starts every event id. Defaults to "ev".
	Prefix string
	// EventType of every event. Defaults to "invoice.paid".
	EventType string
	// PayloadBytes pads the data object to about this size. Defaults to 0.
	PayloadBytes int
}

// LoadStats is what a load run did.
type LoadStats struct {
	Batches, Events, Errors int64
	// Lag is the largest delay between a batch's scheduled time and its
	// start (the generator could not keep its schedule).
	Lag time.Duration
}

// RunLoad produces events into the ledger until ctx ends or Total is
// reached. In-flight batches finish (up to 15s) after ctx ends.
func RunLoad(ctx context.Context, cfg LoadConfig, l *Ledger) (LoadStats, error) {
	if cfg.OutboxShare == 0 {
		cfg.OutboxShare = 0.5
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 5
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "ev"
	}
	if cfg.EventType == "" {
		cfg.EventType = "invoice.paid"
	}
	if cfg.Rate <= 0 || len(cfg.Accounts) == 0 {
		return LoadStats{}, errors.New("chaos: LoadConfig needs Rate and Accounts")
	}
	// The pad is quoted once: formatting each event with fmt (%q of the
	// pad) was a third of the generator's CPU, taken from the machine hookd
	// is measured on.
	pad := strconv.Quote(strings.Repeat("p", max(cfg.PayloadBytes, 0)))
	type job struct {
		seq    int
		outbox bool
		due    time.Time
	}
	jobs := make(chan job, 100000)
	var st LoadStats
	var lagNs atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for j := range jobs {
				if lag := time.Since(j.due); lag > time.Duration(lagNs.Load()) {
					lagNs.Store(int64(lag))
				}
				opCtx, cancel := drain.Context(ctx, 15*time.Second)
				var err error
				if j.outbox {
					err = outboxBatch(opCtx, cfg, l, j.seq, pad)
				} else {
					err = ingressBatch(opCtx, cfg, l, j.seq, pad)
				}
				cancel()
				atomic.AddInt64(&st.Batches, 1)
				if err != nil {
					atomic.AddInt64(&st.Errors, 1)
				}
			}
		})
	}
	interval := time.Duration(float64(time.Second) * float64(cfg.BatchSize) / cfg.Rate)
	start := time.Now()
	seq := 0
	for n := 0; cfg.Total == 0 || n < cfg.Total; n += cfg.BatchSize {
		due := start.Add(time.Duration(seq) * interval)
		if d := time.Until(due); d > 0 {
			if pause(ctx, d) != nil {
				break
			}
		} else if ctx.Err() != nil {
			break
		}
		outbox := cfg.OutboxShare > 0 && (cfg.OutboxShare >= 1 || rand.Float64() < cfg.OutboxShare)
		jobs <- job{seq: seq, outbox: outbox, due: due}
		seq++
	}
	close(jobs)
	wg.Wait()
	st.Events = int64(seq * cfg.BatchSize)
	st.Lag = time.Duration(lagNs.Load())
	return st, nil
}

func (cfg *LoadConfig) account(seq, i int) string {
	return cfg.Accounts[(seq*cfg.BatchSize+i)%len(cfg.Accounts)]
}

func outboxBatch(ctx context.Context, cfg LoadConfig, l *Ledger, seq int, pad string) error {
	rollback := cfg.RollbackEvery > 0 && seq%cfg.RollbackEvery == cfg.RollbackEvery-1
	ids := make([]string, cfg.BatchSize)
	accts := make([]string, cfg.BatchSize)
	datas := make([]string, cfg.BatchSize)
	for i := range ids {
		ids[i] = eventID(cfg.Prefix, "_o", seq, i)
		accts[i] = cfg.account(seq, i)
		datas[i] = string(eventData(seq, i, pad))
	}
	l.setBatch(ids, accts, StateUncertain, time.Time{}, true)
	mark := func(s EventState) { l.setBatch(ids, accts, s, time.Now(), true) }
	tx, err := cfg.Pool.Begin(ctx)
	if err != nil {
		mark(StateRolledBack) // nothing was written
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO webhooks.outbox (id, account, type, payload)
		SELECT id, acct, $4, data::jsonb FROM unnest($1::text[], $2::text[], $3::text[]) AS t(id, acct, data)`,
		ids, accts, datas, cfg.EventType)
	if err != nil || rollback {
		_ = tx.Rollback(ctx)
		mark(StateRolledBack)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, pgx.ErrTxCommitRollback) {
			mark(StateRolledBack)
		} else {
			mark(StateUncertain) // the COMMIT may or may not have happened
		}
		return err
	}
	mark(StateCommitted)
	return nil
}

// appendEnvelope appends the JSON envelope of an ingress event. data is
// written as it is, so it must be valid, compact JSON without characters
// encoding/json would escape (eventData's is). Built by hand, not with
// json.Marshal, whose reflection and re-compacting of data were a tenth of
// the generator's CPU.
func appendEnvelope(b []byte, id, account, typ string, data []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"account":`...)
	b = appendJSONString(b, account)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as encoding/json does: as
// it is when it is printable ASCII without '"', '\\', '<', '>' or '&' (the
// generator's ids, accounts and types), through encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// eventID is prefix + kind + seq + "_" + i.
func eventID(prefix, kind string, seq, i int) string {
	return prefix + kind + strconv.Itoa(seq) + "_" + strconv.Itoa(i)
}

// eventData is an event's data object, {"seq":seq,"i":i,"pad":pad} with
// pad already quoted.
func eventData(seq, i int, pad string) json.RawMessage {
	b := make([]byte, 0, len(pad)+40)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"i":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"pad":`...)
	b = append(b, pad...)
	return append(b, '}')
}

func ingressBatch(ctx context.Context, cfg LoadConfig, l *Ledger, seq int, pad string) error {
	recs := make([]*kgo.Record, 0, cfg.BatchSize+1)
	ids := make([]string, 0, cfg.BatchSize)
	accts := make([]string, 0, cfg.BatchSize)
	for i := range cfg.BatchSize {
		id := eventID(cfg.Prefix, "_i", seq, i)
		acct := cfg.account(seq, i)
		v := appendEnvelope(make([]byte, 0, len(pad)+len(id)+len(acct)+len(cfg.EventType)+80),
			id, acct, cfg.EventType, eventData(seq, i, pad))
		recs = append(recs, &kgo.Record{Topic: cfg.EventsTopic, Key: []byte(acct), Value: v})
		ids = append(ids, id)
		accts = append(accts, acct)
	}
	l.setBatch(ids, accts, StateUncertain, time.Time{}, false)
	invalid := ""
	if cfg.InvalidEvery > 0 && seq%cfg.InvalidEvery == 0 {
		invalid = fmt.Sprintf("not json: %s_bad%d", cfg.Prefix, seq)
		recs = append(recs, &kgo.Record{Topic: cfg.EventsTopic, Value: []byte(invalid)})
	}
	return settleIngress(l, recs, ids, invalid, cfg.Kafka.ProduceSync(ctx, recs...))
}

// settleIngress records the outcome of each produced record: ids[i] is the
// event of recs[i], and the record after them, if any, is the invalid
// envelope. The results come in the order the records were acknowledged
// or failed (partitions answer independently), so each is matched to its
// event by record, not by position.
func settleIngress(l *Ledger, recs []*kgo.Record, ids []string, invalid string, res kgo.ProduceResults) error {
	index := make(map[*kgo.Record]int, len(recs))
	for i, r := range recs {
		index[r] = i
	}
	now := time.Now()
	var firstErr error
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range res {
		i, ok := index[r.Record]
		if !ok {
			continue
		}
		if i >= len(ids) {
			if r.Err == nil {
				l.invalid[invalid] = true
			}
			continue
		}
		st := StateCommitted
		if r.Err != nil {
			st = StateUncertain
			if firstErr == nil {
				firstErr = r.Err
			}
		}
		l.setLocked(ids[i], EventInfo{Account: string(recs[i].Key), State: st, At: now})
	}
	return firstErr
}
