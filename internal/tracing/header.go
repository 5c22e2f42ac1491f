package tracing

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header is the Kafka record header (and the HTTP request header) that
// carries a span's W3C trace context between the stages, as
// "00-<trace id>-<span id>-<flags>". HeaderState carries its tracestate,
// when the trace has one.
const (
	Header      = "traceparent"
	HeaderState = "tracestate"
)

var w3c propagation.TraceContext

// headers adapts a record's headers to propagation.TextMapCarrier.
type headers struct{ r *kgo.Record }

func (h headers) Get(key string) string {
	for _, kv := range h.r.Headers {
		if kv.Key == key {
			return string(kv.Value)
		}
	}
	return ""
}

// Set replaces key's value, or appends it.
func (h headers) Set(key, value string) {
	for i, kv := range h.r.Headers {
		if kv.Key == key {
			h.r.Headers[i].Value = []byte(value)
			return
		}
	}
	h.r.Headers = append(h.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (h headers) Keys() []string {
	keys := make([]string, len(h.r.Headers))
	for i, kv := range h.r.Headers {
		keys[i] = kv.Key
	}
	return keys
}

// FromRecord returns ctx with the remote span context of r's traceparent
// header as parent; ctx unchanged when r has none or an invalid one (a new
// trace starts).
func FromRecord(ctx context.Context, r *kgo.Record) context.Context {
	return w3c.Extract(ctx, headers{r})
}

// ToRecord sets r's traceparent (and tracestate) headers to ctx's span.
func ToRecord(ctx context.Context, r *kgo.Record) { w3c.Inject(ctx, headers{r}) }

// FromTraceparent returns ctx with the remote span context of a
// traceparent value (the outbox column, a delivery's header) as parent;
// ctx unchanged when tp is empty or invalid.
func FromTraceparent(ctx context.Context, tp, state string) context.Context {
	if tp == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{Header: tp, HeaderState: state})
}

// Traceparent is the traceparent value of sc, "" when sc is not valid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c[Header]
}
