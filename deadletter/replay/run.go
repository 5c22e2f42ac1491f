package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// Prepared is a checked replay request whose audit row exists: what an
// API answers 202 for, before running it in the background, so that the
// row it points to is always there.
type Prepared struct {
	deps   Deps
	req    Request
	row    store.Replay
	stored storedFilter
}

// Prepare validates req (not a dry run), refuses a bad target endpoint,
// and creates its audit row, or finds the row of the same request made
// before (ErrRequestMismatch when an explicit id names another request).
// Nothing is replayed until Run.
func Prepare(ctx context.Context, deps Deps, req Request) (*Prepared, error) {
	deps = withLogger(deps)
	if req.DryRun {
		return nil, fmt.Errorf("%w: a dry run is not prepared, run it", ErrInvalid)
	}
	if err := Check(ctx, deps, &req); err != nil {
		return nil, err
	}
	hash := req.requestHash()
	filterJSON, err := req.storedJSON()
	if err != nil {
		return nil, err
	}
	id := req.ID
	if id == "" {
		id = req.DerivedID()
	}
	row, _, err := deps.Store.CreateReplay(ctx, store.Replay{ID: id, Kind: req.Kind, Actor: req.Actor, Reason: req.Reason,
		Account: req.Account, Filter: filterJSON})
	if errors.Is(err, store.ErrReplayIDTaken) {
		return nil, fmt.Errorf("%w: %w", ErrRequestMismatch, err)
	}
	if err != nil {
		return nil, err
	}
	var stored storedFilter
	if err := json.Unmarshal(row.Filter, &stored); err != nil {
		return nil, fmt.Errorf("replay %s: reading its filter: %w", id, err)
	}
	if stored.RequestHash != hash || row.Kind != req.Kind || row.Account != req.Account {
		return nil, fmt.Errorf("%w: %s was created by %s for %q", ErrRequestMismatch, id, row.Actor, row.Reason)
	}
	return &Prepared{deps: deps, req: req, row: row, stored: stored}, nil
}

// Row is the audit row as Prepare found or created it.
func (p *Prepared) Row() store.Replay { return p.row }

// Run carries the request out, or resumes it; a request already done
// replays nothing again (Result.AlreadyDone).
func (p *Prepared) Run(ctx context.Context) (Result, error) {
	id := p.row.ID
	if p.row.Status == store.ReplayDone {
		return Result{Replay: p.row, AlreadyDone: true}, nil
	}
	lock, err := p.deps.Store.LockReplay(ctx, p.row.Account, id)
	if err != nil {
		return Result{}, err
	}
	defer lock.Unlock()
	// Read again under the lock: another run may have finished meanwhile.
	row, err := p.deps.Store.GetAccountReplay(ctx, p.row.Account, id)
	if err != nil {
		return Result{}, err
	}
	if row.Status == store.ReplayDone {
		return Result{Replay: row, AlreadyDone: true}, nil
	}
	// The stored filter wins: "24h" means 24h before the first run.
	req := p.req
	req.Filter, req.Limit, req.IncludeResolved = p.stored.Filter, p.stored.Limit, p.stored.IncludeResolved
	r := &runner{deps: p.deps, req: req, row: row, skippedEPs: map[string]string{}, eps: map[string]epState{},
		outage: &outage{log: p.deps.Logger, id: id}}
	return r.run(ctx)
}

// progress is the progress column of webhooks.replays.
type progress struct {
	// Ranges are the DLQ offsets the request covers, fixed when it first
	// ran: later dead letters (including deaths of this replay's own
	// records) are not part of it.
	Ranges map[int32]Range `json:"ranges"`
	// Next is, per DLQ partition, the first offset not yet handled; every
	// record replayed below it was acknowledged by the broker.
	Next map[int32]int64 `json:"next"`
	// Markers is, per deliveries partition, an offset at or below every
	// record this request produced that Next does not cover yet: a resumed
	// run reads from there to find them.
	Markers map[int32]int64 `json:"markers"`
	// Scanned counts the dead letters read: of the request's account
	// only, when it has one.
	Scanned int64 `json:"scanned"`
	// Skips counts the skipped dead letters by reason.
	Skips map[string]int64 `json:"skips,omitempty"`
}

// runner is one run of a replay request.
type runner struct {
	deps       Deps
	req        Request
	row        store.Replay
	prog       progress
	eps        map[string]epState
	skippedEPs map[string]string
	unreplay   int64
	// recovered holds the DLQ offsets ("p/offset") an interrupted run
	// produced without saving; pendingRecovered counts those not passed yet.
	recovered        map[string]bool
	pendingRecovered int
	total            int64
	// resolved says which dead letters of the batch being handled are
	// resolved.
	resolved resolvedSet
	// outage reports a Kafka outage the run waits out.
	outage *outage
}

// run carries the request out in named steps: load the saved progress,
// connect, then (attempt) plan the DLQ ranges (on the first run), recover
// what an interrupted run produced and replay the remaining ranges, and
// record how the run ended. A Kafka outage does not end the run: the
// attempt starts again from the saved progress once Kafka answers.
func (r *runner) run(ctx context.Context) (Result, error) {
	if err := r.loadProgress(); err != nil {
		return Result{}, err
	}
	cl, err := r.connect()
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	return r.finish(ctx, r.retrying(ctx, func() error { return r.attempt(ctx, cl, adm) }))
}

// attempt replays from the saved progress: what an earlier attempt or run
// produced without saving is read back first (recover), so an attempt
// cut short by an outage is simply made again.
func (r *runner) attempt(ctx context.Context, cl *kgo.Client, adm *kadm.Client) error {
	if err := r.planRanges(ctx, adm); err != nil {
		return err
	}
	if err := r.recover(ctx, adm); err != nil {
		return err
	}
	r.outage.end(ctx)
	if err := r.save(ctx, ""); err != nil {
		return err
	}
	return r.replayRanges(ctx, cl)
}

// loadProgress reads the progress an earlier run of the request saved.
func (r *runner) loadProgress() error {
	if len(r.row.Progress) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.row.Progress, &r.prog); err != nil {
		return fmt.Errorf("replay %s: reading its progress: %w", r.row.ID, err)
	}
	return nil
}

// connect makes the run's producing client (it also lists offsets).
func (r *runner) connect() (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(slices.Clip(r.deps.KafkaOpts),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// planRanges fixes the DLQ offset ranges the request covers when it first
// runs (a resumed run keeps them), and counts their offsets.
func (r *runner) planRanges(ctx context.Context, adm *kadm.Client) error {
	if r.prog.Ranges == nil {
		ranges, err := bounds(ctx, adm, r.deps.Names.DLQ, r.req.Filter)
		if err != nil {
			return err
		}
		r.prog.Ranges, r.prog.Next = ranges, map[int32]int64{}
		for p, rg := range ranges {
			r.prog.Next[p] = rg.From
		}
	}
	r.total = 0
	for _, rg := range r.prog.Ranges {
		r.total += rg.To - rg.From
	}
	return nil
}

// remaining is what is left of each DLQ range past the saved progress.
func (r *runner) remaining() map[int32]Range {
	out := map[int32]Range{}
	for p, rg := range r.prog.Ranges {
		if next := max(r.prog.Next[p], rg.From); next < rg.To {
			out[p] = Range{From: next, To: rg.To}
		}
	}
	return out
}

// replayRanges reads the remaining ranges (one batch ahead, readAhead)
// and replays the matching dead letters chunk by chunk; progress is saved
// after every acknowledged chunk and after every batch.
func (r *runner) replayRanges(ctx context.Context, cl *kgo.Client) error {
	c := r.newChunk(cl)
	if r.req.Limit == 0 || r.row.Replayed < r.req.Limit {
		pace := pacer{rate: r.req.Rate, start: time.Now()}
		err := readAhead(ctx, r.deps, &r.req, r.remaining(), func(b *batch) error {
			return r.handleBatch(ctx, c, &pace, b)
		})
		if err != nil {
			return err
		}
	}
	return c.flush(ctx)
}

// handleBatch handles one fetched batch of DLQ records, decoded and looked
// up: each record until the request's limit, then it flushes the chunk.
func (r *runner) handleBatch(ctx context.Context, c *chunk, pace *pacer, b *batch) error {
	if err := b.wait(); err != nil {
		return err
	}
	r.resolved = b.resolved
	for i, rec := range b.recs {
		if c.limitReached() {
			return errStop
		}
		if err := r.handle(ctx, c, pace, rec, &b.entries[i]); err != nil {
			return err
		}
	}
	return c.flush(ctx)
}

// handle takes one DLQ record of the ranges: it counts it, tells OnEntry
// what is done with it, and adds its delivery to the chunk when it is
// replayed.
func (r *runner) handle(ctx context.Context, c *chunk, pace *pacer, rec *kgo.Record, e *Entry) error {
	if r.req.Account == "" || e.Account == r.req.Account {
		// An account's request counts its own dead letters only: the
		// others' are none of its business (AccountView).
		c.scanned++
	}
	c.next[rec.Partition] = rec.Offset + 1
	if !r.req.Filter.Match(e) {
		return nil
	}
	c.matched++
	action, reason, err := r.action(ctx, e)
	if err != nil {
		return err
	}
	if r.req.OnEntry != nil {
		r.req.OnEntry(*e, action)
	}
	switch action {
	case "replay":
	case "replayed before":
		c.before++
		c.sends = append(c.sends, store.ReplaySend{Account: e.delivery.Account, DeliveryID: e.delivery.ID, EndpointID: e.delivery.EndpointID})
		return nil
	default:
		c.skipped++
		c.skips[reason]++
		if reason == SkipUnreplayable {
			c.unreplay++
		}
		return nil
	}
	if err := pace.wait(ctx); err != nil {
		return err
	}
	return c.add(ctx, r.record(rec, e.delivery), e.delivery)
}

// action decides what to do with a matching dead letter: "replay",
// "replayed before", or "skip: <why>" with the skip reason.
func (r *runner) action(ctx context.Context, e *Entry) (action, reason string, err error) {
	if e.Unreplayable != "" {
		return "skip: " + e.Unreplayable, SkipUnreplayable, nil
	}
	pos := strconv.Itoa(int(e.Partition)) + "/" + strconv.FormatInt(e.Offset, 10)
	if r.recovered[pos] {
		delete(r.recovered, pos)
		r.pendingRecovered--
		return "replayed before", "", nil
	}
	if e.ReplayID == r.row.ID {
		// The death of one of this request's own replays (possible only
		// with an explicit id reused across DLQ snapshots): never again.
		return "skip: " + skipText[SkipOwnDeath], SkipOwnDeath, nil
	}
	s, err := endpointState(ctx, r.deps, r.eps, e.EndpointID, r.req.Force)
	if err != nil {
		return "", "", err
	}
	if reason := skipReason(e, s, r.req.Account); reason != "" {
		if reason == SkipAccountMismatch {
			r.deps.Logger.WarnContext(ctx, "replay skips a dead letter whose account is not its endpoint's or the request's",
				"replay_id", r.row.ID, "endpoint_id", e.EndpointID, "delivery_id", e.DeliveryID, "event_id", e.EventID,
				"record_account", e.Account, "endpoint_account", s.account, "request_account", r.req.Account,
				"dlq_partition", e.Partition, "dlq_offset", e.Offset)
		}
		r.skippedEPs[e.EndpointID] = skipText[reason]
		return "skip: " + skipText[reason], reason, nil
	}
	if r.resolved.has(e) {
		return "skip: " + skipText[SkipAlreadyDelivered], SkipAlreadyDelivered, nil
	}
	return "replay", "", nil
}

// record builds the replayed delivery: same key, body, delivery and event
// ids; attempt 1 with no retry history; the replay id and source headers.
// The partition comes from the producer's key hashing, as for the router.
func (r *runner) record(src *kgo.Record, d *delivery.Delivery) *kgo.Record {
	fresh := *d
	fresh.Attempt = 1
	fresh.FirstAttempt, fresh.DueAt = time.Time{}, time.Time{}
	fresh.LastStatus, fresh.LastError, fresh.ClientErrors, fresh.Deferrals = 0, "", 0, 0
	fresh.ReplayID = r.row.ID
	rec := fresh.Record(r.deps.Names.Deliveries)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderSource,
		Value: []byte(strconv.Itoa(int(src.Partition)) + "/" + strconv.FormatInt(src.Offset, 10))})
	return rec
}

// save writes the counters and progress; status ends the run when set.
func (r *runner) save(ctx context.Context, status string) error {
	b, err := json.Marshal(r.prog)
	if err != nil {
		return err
	}
	u := store.ReplayUpdate{Account: r.row.Account, ID: r.row.ID, Matched: r.row.Matched, Replayed: r.row.Replayed, Skipped: r.row.Skipped,
		Progress: b, Status: status}
	if status == store.ReplayFailed {
		u.Error = r.row.Error
	}
	if err := r.deps.Store.UpdateReplay(ctx, u); err != nil {
		return err
	}
	if r.req.OnProgress != nil {
		r.req.OnProgress(Progress{ID: r.row.ID, Total: r.total, Scanned: r.prog.Scanned, Matched: r.row.Matched,
			Replayed: r.row.Replayed, Skipped: r.row.Skipped})
	}
	return nil
}

// finish records how the run ended and returns the final row.
func (r *runner) finish(ctx context.Context, runErr error) (Result, error) {
	status := store.ReplayDone
	switch {
	case runErr == nil:
	case ctx.Err() != nil:
		status, runErr = store.ReplayInterrupted, ctx.Err()
	default:
		status = store.ReplayFailed
		r.row.Error = runErr.Error()
	}
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.save(saveCtx, status); err != nil && runErr == nil {
		runErr = err
	}
	row, err := r.deps.Store.GetAccountReplay(saveCtx, r.row.Account, r.row.ID)
	if err != nil {
		row = r.row
	}
	res := Result{Replay: row, Unreplayable: r.unreplay, Skips: r.prog.Skips}
	if len(r.skippedEPs) > 0 {
		res.SkippedEndpoints = r.skippedEPs
	}
	return res, runErr
}
