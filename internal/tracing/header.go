package tracing

import (
	"context"
	"encoding/hex"
	"strings"

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
// ctx unchanged when tp is empty or invalid. The common form (version
// 00, 55 characters) is read by hand, without the propagator's carrier
// map: the dispatcher calls it for every request.
func FromTraceparent(ctx context.Context, tp, state string) context.Context {
	if tp == "" {
		return ctx
	}
	if sc, ok := parseV00(tp); ok && state == "" {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return w3c.Extract(ctx, propagation.MapCarrier{Header: tp, HeaderState: state})
}

// parseV00 reads "00-<32 hex>-<16 hex>-<2 hex>" (lower case, ids not all
// zero, flags 00 to 03); false for anything else, which
// the propagator then judges.
func parseV00(tp string) (trace.SpanContext, bool) {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	flags := tp[53:55]
	if flags != "00" && flags != "01" && flags != "02" && flags != "03" {
		return trace.SpanContext{}, false // reserved bits: the propagator's rules
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	if err1 != nil || err2 != nil || strings.ToLower(tp) != tp {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[1] - '0'), Remote: true}), true
}

// Traceparent is the traceparent value of sc, "" when sc is not valid:
// one allocation, the string.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	copy(b[:], "00-")
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}
