package router

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/producer/event"
)

// trace starts the fan-out span of env, read from rec, a child of rec's
// traceparent header (a new trace without one), with its deliveries (b's
// matches) as attributes, and returns its traceparent and tracestate for
// the delivery records. The span ends with the batch's transaction
// (endSpans). With tracing off it does nothing and returns "".
func (r *Router) trace(ctx context.Context, b *batch, rec *kgo.Record, env event.Envelope) (string, string) {
	if r.tracer == nil {
		return "", ""
	}
	ctx = tracing.FromRecord(ctx, rec)
	_, span := r.tracer.Start(ctx, "fan-out "+rec.Topic, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", rec.Topic),
		attribute.Int("messaging.destination.partition.id", int(rec.Partition)),
		attribute.Int64("messaging.kafka.offset", rec.Offset),
		attribute.String("hookd.event_id", env.ID),
		attribute.String("hookd.account", env.Account),
		attribute.String("hookd.event_type", env.Type),
		attribute.Int("hookd.deliveries", len(b.matches)),
		attribute.StringSlice("hookd.endpoint_ids", endpointIDs(b.matches)),
	))
	b.spans = append(b.spans, span)
	sc := span.SpanContext()
	return tracing.Traceparent(sc), sc.TraceState().String()
}

func endpointIDs(eps []*endpoint.Endpoint) []string {
	ids := make([]string, len(eps))
	for i, ep := range eps {
		ids[i] = ep.ID
	}
	return ids
}

// endSpans ends b's fan-out spans: with an error status unless their
// transaction committed (the batch is fanned out again, in new spans).
func endSpans(b *batch, committed bool) {
	for _, s := range b.spans {
		if !committed {
			s.SetStatus(codes.Error, "transaction not committed: the batch is fanned out again")
		}
		s.End()
	}
	clear(b.spans)
	b.spans = b.spans[:0]
}
