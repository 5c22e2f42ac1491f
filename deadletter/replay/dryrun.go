package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/hookd/hookd/store"
)

// dryRunner counts what a request would do, producing nothing.
type dryRunner struct {
	deps             Deps
	req              Request
	eps              map[string]epState
	res              Result
	matched, skipped int64
}

// dryRun scans the matching dead letters, decides each as a run would
// (without recovery, which only a real run has), and records the counts in
// an audit row of its own.
func dryRun(ctx context.Context, deps Deps, req Request) (Result, error) {
	filterJSON, err := req.storedJSON()
	if err != nil {
		return Result{}, err
	}
	d := &dryRunner{deps: deps, req: req, eps: map[string]epState{},
		res: Result{SkippedEndpoints: map[string]string{}, Skips: map[string]int64{}}}
	ranges, err := dlqRanges(ctx, deps, req.Filter)
	if err != nil {
		return Result{}, err
	}
	err = readAhead(ctx, deps, &req, ranges, func(b *batch) error { return d.batch(ctx, b) })
	if err != nil {
		return d.res, err
	}
	return d.finish(ctx, filterJSON)
}

// batch decides the matching dead letters of one fetched batch, decoded
// and looked up (readAhead).
func (d *dryRunner) batch(ctx context.Context, b *batch) error {
	if err := b.wait(); err != nil {
		return err
	}
	for i := range b.entries {
		if e := &b.entries[i]; d.req.Filter.Match(e) {
			if err := d.entry(ctx, e, b.resolved); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *dryRunner) entry(ctx context.Context, e *Entry, resolved resolvedSet) error {
	reason, action, err := dryEntry(ctx, d.deps, d.req, d.eps, e, resolved)
	if err != nil {
		return err
	}
	switch reason {
	case "":
		if d.req.Limit > 0 && d.res.Replayed >= d.req.Limit {
			return errStop
		}
		d.res.Replayed++ // would be replayed
	case SkipUnreplayable:
		d.res.Unreplayable++
	case SkipAlreadyDelivered:
		// A dead letter's own state, not its endpoint's.
	default:
		d.res.SkippedEndpoints[e.EndpointID] = skipText[reason]
	}
	if reason != "" {
		d.skipped++
		d.res.Skips[reason]++
	}
	d.matched++
	if d.req.OnEntry != nil {
		d.req.OnEntry(*e, action)
	}
	return nil
}

// finish records the dry run's audit row.
func (d *dryRunner) finish(ctx context.Context, filterJSON []byte) (Result, error) {
	req, res := d.req, d.res
	var b [8]byte
	_, _ = rand.Read(b[:])
	row, _, err := d.deps.Store.CreateReplay(ctx, store.Replay{ID: "rpl_dry_" + hex.EncodeToString(b[:]), Kind: req.Kind,
		Actor: req.Actor, Reason: req.Reason, Account: req.Account, Filter: filterJSON, DryRun: true,
		Matched: d.matched, Replayed: res.Replayed, Skipped: d.skipped, Status: store.ReplayDone})
	if err != nil {
		return res, err
	}
	res.Replay = row
	if len(res.SkippedEndpoints) == 0 {
		res.SkippedEndpoints = nil
	}
	if len(res.Skips) == 0 {
		res.Skips = nil
	}
	return res, nil
}

// dryEntry decides a dry run's action on one matching dead letter; reason
// is empty when it would be replayed.
func dryEntry(ctx context.Context, deps Deps, req Request, eps map[string]epState, e *Entry,
	resolved resolvedSet) (reason, action string, err error) {
	if e.Unreplayable != "" {
		return SkipUnreplayable, "skip: " + e.Unreplayable, nil
	}
	s, err := endpointState(ctx, deps, eps, e.EndpointID, req.Force)
	if err != nil {
		return "", "", err
	}
	if reason = skipReason(e, s, req.Account); reason != "" {
		return reason, "skip: " + skipText[reason], nil
	}
	if resolved.has(e) {
		return SkipAlreadyDelivered, "skip: " + skipText[SkipAlreadyDelivered], nil
	}
	return "", "replay", nil
}
