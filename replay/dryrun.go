package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/hookd/hookd/store"
)

func dryRun(ctx context.Context, deps Deps, req Request) (Result, error) {
	since, until := req.specs()
	filterJSON, err := json.Marshal(storedFilter{Filter: req.Filter, SinceSpec: since, UntilSpec: until,
		Limit: req.Limit, Force: req.Force, RequestHash: req.requestHash()})
	if err != nil {
		return Result{}, err
	}
	res := Result{SkippedEndpoints: map[string]string{}, Skips: map[string]int64{}}
	eps := map[string]epState{}
	var matched, skipped int64
	_, err = Scan(ctx, deps, req.Filter, func(e Entry) error {
		reason, action, err := dryEntry(ctx, deps, req, eps, &e)
		if err != nil {
			return err
		}
		switch reason {
		case "":
			if req.Limit > 0 && res.Replayed >= req.Limit {
				return errStop
			}
			res.Replayed++ // would be replayed
		case SkipUnreplayable:
			res.Unreplayable++
		default:
			res.SkippedEndpoints[e.EndpointID] = skipText[reason]
		}
		if reason != "" {
			skipped++
			res.Skips[reason]++
		}
		matched++
		if req.OnEntry != nil {
			req.OnEntry(e, action)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return res, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	row, _, err := deps.Store.CreateReplay(ctx, store.Replay{ID: "rpl_dry_" + hex.EncodeToString(b[:]), Kind: req.Kind,
		Actor: req.Actor, Reason: req.Reason, Account: req.Account, Filter: filterJSON, DryRun: true,
		Matched: matched, Replayed: res.Replayed, Skipped: skipped, Status: store.ReplayDone})
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
func dryEntry(ctx context.Context, deps Deps, req Request, eps map[string]epState, e *Entry) (reason, action string, err error) {
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
	return "", "replay", nil
}
