package attemptlog

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/tracing"
)

// startSpans starts a write span for each attempt record of recs that
// carries a traceparent (a child of that attempt's span), so that each
// event's trace ends with its attempt reaching the log. Records without
// one (tracing off in the dispatcher) get none; with tracing off here,
// nothing is looked at.
func (w *Writer) startSpans(ctx context.Context, recs []*kgo.Record, attempts, pending int) []trace.Span {
	if w.tracer == nil {
		return nil
	}
	var spans []trace.Span
	for _, kr := range recs {
		if kr.Topic == w.cfg.DeliveriesTopic || !hasTraceparent(kr) {
			continue
		}
		_, span := w.tracer.Start(tracing.FromRecord(ctx, kr), "write attempt log", trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.collection.name", "webhooks.attempts"),
			attribute.String("hookd.delivery_id", string(kr.Key)),
			attribute.Int("hookd.batch.attempts", attempts),
			attribute.Int("hookd.batch.pending", pending),
		))
		spans = append(spans, span)
	}
	return spans
}

func hasTraceparent(kr *kgo.Record) bool {
	for _, h := range kr.Headers {
		if h.Key == delivery.HeaderTraceparent {
			return true
		}
	}
	return false
}

// endSpans ends the write spans, with err (the batch is not written: it
// is read again after a restart) as their error.
func endSpans(spans []trace.Span, err error) {
	for _, s := range spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		}
		s.End()
	}
}
