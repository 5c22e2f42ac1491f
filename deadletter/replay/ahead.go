package replay

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// batch is one fetched batch of dead letters, decoded, with which of them
// are resolved (SkipAlreadyDelivered); prepared in the background.
type batch struct {
	recs     []*kgo.Record
	entries  []Entry
	resolved resolvedSet
	err      error
	done     chan struct{}
}

// prepareBatch decodes recs and looks up, in one query, which of those
// matching req are resolved, in a goroutine of its own.
func prepareBatch(ctx context.Context, deps Deps, req *Request, recs []*kgo.Record) *batch {
	b := &batch{recs: append([]*kgo.Record(nil), recs...), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.entries = make([]Entry, len(b.recs))
		for i, rec := range b.recs {
			b.entries[i] = decode(rec)
		}
		b.resolved, b.err = resolvedOf(ctx, deps, req, b.entries)
	}()
	return b
}

// wait returns once the batch is prepared.
func (b *batch) wait() error {
	<-b.done
	return b.err
}

// readAhead reads the DLQ ranges and calls handle with each fetched batch,
// one batch ahead: while handle works on a batch (producing, saving), the
// next one is decoded and its resolved dead letters looked up in the
// background, so that the look-up's round trip hides behind the work. It
// holds two fetches at most. handle returning errStop ends the read without
// an error; a batch fetched but not handled changes nothing.
func readAhead(ctx context.Context, deps Deps, req *Request, ranges map[int32]Range, handle func(*batch) error) error {
	var ahead *batch
	stopped := false
	err := readRanges(ctx, deps.KafkaOpts, deps.Names.DLQ, ranges, func(recs []*kgo.Record) error {
		cur := ahead
		ahead = prepareBatch(ctx, deps, req, recs)
		if cur == nil {
			return nil
		}
		err := handle(cur)
		stopped = errors.Is(err, errStop)
		return err
	})
	if ahead == nil {
		return err
	}
	if err != nil || stopped {
		_ = ahead.wait() // never handled: its look-up only needs to end
		return err
	}
	if err := handle(ahead); err != nil && !errors.Is(err, errStop) {
		return err
	}
	return nil
}
