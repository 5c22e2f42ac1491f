package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookd/hookd/store"
)

// checkTargetEndpoint refuses a request naming an endpoint that does not
// exist (or is another account's), or is disabled without Force.
func checkTargetEndpoint(ctx context.Context, deps Deps, req *Request) error {
	if req.Filter.EndpointID == "" {
		if req.Kind == KindResend {
			return fmt.Errorf("%w: resend needs an endpoint", ErrInvalid)
		}
		return nil
	}
	ep, err := deps.Store.GetEndpoint(ctx, req.Filter.EndpointID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && req.Account != "" && ep.Account != req.Account) {
		return fmt.Errorf("%w: %s", ErrEndpointNotFound, req.Filter.EndpointID)
	}
	if err != nil {
		return err
	}
	if !ep.Active() && !req.Force && !req.DryRun {
		return fmt.Errorf("%w: %s is disabled (%s); enable it first, or pass --force to replay to it anyway",
			ErrEndpointDisabled, ep.ID, ep.DisabledReason)
	}
	return nil
}

// epState is what a run knows of one endpoint.
type epState struct {
	// account is the endpoint's account; empty when it was deleted.
	account string
	// skip says why its dead letters are skipped (SkipEndpointDeleted,
	// SkipEndpointDisabled); empty: replay.
	skip string
}

// endpointState looks an endpoint up once per run.
func endpointState(ctx context.Context, deps Deps, cache map[string]epState, id string, force bool) (epState, error) {
	if s, ok := cache[id]; ok {
		return s, nil
	}
	var s epState
	ep, err := deps.Store.GetEndpoint(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.skip = SkipEndpointDeleted
	case err != nil:
		return s, err
	default:
		s.account = ep.Account
		if !ep.Active() && !force {
			s.skip = SkipEndpointDisabled
		}
	}
	cache[id] = s
	return s, nil
}

// skipText is what a skip reason says in an entry's action and in
// Result.SkippedEndpoints.
var skipText = map[string]string{
	SkipEndpointDeleted:  "endpoint deleted",
	SkipEndpointDisabled: "endpoint disabled (use --force)",
	SkipAccountMismatch:  "account_mismatch: the record's account is not the endpoint's or the request's",
	SkipOwnDeath:         "died in this replay",
	SkipAlreadyDelivered: "already delivered since (--include-resolved sends it again)",
}

// skipReason decides whether a matching, replayable dead letter is
// skipped, and why: a record goes only to an existing endpoint of its own
// account, for a request of that account (or an operator's).
func skipReason(e *Entry, s epState, reqAccount string) string {
	switch {
	case s.skip == SkipEndpointDeleted:
		return s.skip
	case e.Account != s.account || (reqAccount != "" && e.Account != reqAccount):
		return SkipAccountMismatch
	}
	return s.skip
}

// deliveryKey names the delivery a dead letter stands for.
func deliveryKey(e *Entry) store.DeliveryKey {
	return store.DeliveryKey{Account: e.Account, ID: e.DeliveryID}
}

// dlqPos is a dead letter's position on the DLQ topic.
type dlqPos struct {
	partition int32
	offset    int64
}

// resolvedSet holds the resolved dead letters of a batch.
type resolvedSet map[dlqPos]bool

func (s resolvedSet) has(e *Entry) bool { return s[dlqPos{e.Partition, e.Offset}] }

// resolvedOf looks up, in two queries, which of the dead letters of a
// batch that match the request are resolved (SkipAlreadyDelivered): their
// delivery was delivered since, or a replay or resend sent it again since
// it was dead-lettered, by the replay's own record of what it sent
// (webhooks.replay_sends, written once the broker acknowledged it). The
// latter covers the seconds before the delivery log says delivered: a
// resend right after a replay does not send again what the replay just
// sent. Nil, without a query, when the request includes resolved dead
// letters.
func resolvedOf(ctx context.Context, deps Deps, req *Request, es []Entry) (resolvedSet, error) {
	if req.IncludeResolved {
		return nil, nil
	}
	keys := make([]store.DeliveryKey, 0, len(es))
	for i := range es {
		e := &es[i]
		if e.Unreplayable == "" && e.DeliveryID != "" && req.Filter.Match(e) {
			keys = append(keys, deliveryKey(e))
		}
	}
	delivered, err := deps.Store.Delivered(ctx, keys)
	if err != nil {
		return nil, err
	}
	sent, err := deps.Store.LastReplaySends(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := resolvedSet{}
	for i := range es {
		e := &es[i]
		k := deliveryKey(e)
		if at, ok := sent[k]; delivered[k] || (ok && !at.Before(e.DeadAt)) {
			out[dlqPos{e.Partition, e.Offset}] = true
		}
	}
	return out, nil
}
