package relay

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/store"
)

// trace starts row's publish span, a child of the application's span when
// the row has a traceparent (else the root of a new trace), and sets rec's
// traceparent header to it, so that the router continues the trace. The
// returned done ends the span, with the error done gets, then calls done.
// With tracing off it returns done as it is.
func (r *Relay) trace(row store.OutboxRow, rec *kgo.Record, done func(error)) func(error) {
	if r.tracer == nil {
		return done
	}
	ctx := tracing.FromTraceparent(context.Background(), row.Traceparent, "")
	ctx, span := r.tracer.Start(ctx, "publish "+rec.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "publish"),
		attribute.String("messaging.destination.name", rec.Topic),
		attribute.String("hookd.event_id", row.ID),
		attribute.String("hookd.account", row.Account),
		attribute.String("hookd.event_type", row.Type),
	))
	tracing.ToRecord(ctx, rec)
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		done(err)
	}
}
