package replay

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
)

// recover finds the records an interrupted run produced after its last
// save: every record on the deliveries topic from the saved markers on
// that carries this replay's id. With no markers yet, it sets them to the
// current end offsets (nothing of this request is above them).
func (r *runner) recover(ctx context.Context, adm *kadm.Client) error {
	ranges, err := r.markedRanges(ctx, adm)
	if err != nil || ranges == nil {
		return err
	}
	if r.recovered, err = r.readBack(ctx, ranges); err != nil {
		return fmt.Errorf("reading back what the interrupted run produced: %w", err)
	}
	r.dropSaved()
	r.pendingRecovered = len(r.recovered)
	if len(r.recovered) > 0 {
		r.deps.Logger.InfoContext(ctx, "replay resumed: records produced by the interrupted run will not be sent again",
			"replay_id", r.row.ID, "found", len(r.recovered))
	}
	return nil
}

// markedRanges is, per deliveries partition, the offsets from the saved
// marker to the end: where an interrupted run's records can be. On the
// first run it sets the markers to the end offsets and returns nil.
func (r *runner) markedRanges(ctx context.Context, adm *kadm.Client) (map[int32]Range, error) {
	topic := r.deps.Names.Deliveries
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, kafkaErr(err))
	}
	if r.prog.Markers == nil {
		r.prog.Markers = map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) { r.prog.Markers[o.Partition] = o.Offset })
		return nil, nil
	}
	ranges := map[int32]Range{}
	ends.Each(func(o kadm.ListedOffset) {
		if m, ok := r.prog.Markers[o.Partition]; ok && m < o.Offset {
			ranges[o.Partition] = Range{From: m, To: o.Offset}
		}
	})
	return ranges, nil
}

// readBack reads ranges of the deliveries topic and returns the DLQ
// positions ("p/offset", HeaderSource) of the records this replay produced.
func (r *runner) readBack(ctx context.Context, ranges map[int32]Range) (map[string]bool, error) {
	found := map[string]bool{}
	id := []byte(r.row.ID)
	err := readRanges(ctx, r.deps.KafkaOpts, r.deps.Names.Deliveries, ranges, func(recs []*kgo.Record) error {
		for _, rec := range recs {
			var mine bool
			var src string
			for _, h := range rec.Headers {
				switch h.Key {
				case delivery.HeaderReplayID:
					mine = string(h.Value) == string(id)
				case HeaderSource:
					src = string(h.Value)
				}
			}
			if mine && src != "" {
				found[src] = true
			}
		}
		return nil
	})
	return found, err
}

// dropSaved forgets the recovered records that the saved progress covers
// already (a run that died between its save and the next chunk).
func (r *runner) dropSaved() {
	for pos := range r.recovered {
		ps, os, _ := strings.Cut(pos, "/")
		p, _ := strconv.ParseInt(ps, 10, 32)
		o, _ := strconv.ParseInt(os, 10, 64)
		if o < r.prog.Next[int32(p)] {
			delete(r.recovered, pos)
		}
	}
}
