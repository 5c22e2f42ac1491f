package dispatcher

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/tracing"
)

// startSpan starts the HTTP client span of r's request to t, a child of
// the delivery's traceparent (the router's fan-out span), and returns the
// request's context holding it. With tracing off it returns d.workCtx and
// a nil span: no allocation on the hot path.
func (d *Dispatcher) startSpan(r *record, t Target) (context.Context, trace.Span) {
	if d.tracer == nil {
		return d.workCtx, nil
	}
	dl := r.d
	ctx := tracing.FromTraceparent(d.workCtx, dl.Traceparent, dl.Tracestate)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		attribute.String("http.request.method", http.MethodPost),
		attribute.String("hookd.delivery_id", dl.ID),
		attribute.String("hookd.event_id", dl.EventID),
		attribute.String("hookd.endpoint_id", dl.EndpointID),
		attribute.String("hookd.account", dl.Account),
		attribute.Int("hookd.attempt", dl.Attempt),
		attribute.String("hookd.tier", r.rec.Topic),
	)
	attrs = appendURLAttributes(attrs, t.URL)
	return d.tracer.Start(ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// appendURLAttributes appends the semantic url.full, server.address and
// server.port of raw. url.full leaves out the user info and the query, which may hold
// the receiver's credentials (a token in the query string is common): a
// trace backend is read by more people than the endpoint's settings.
func appendURLAttributes(attrs []attribute.KeyValue, raw string) []attribute.KeyValue {
	u, err := url.Parse(raw)
	if err != nil {
		return attrs
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	clean := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	attrs = append(attrs, attribute.String("url.full", clean.String()), attribute.String("server.address", u.Hostname()))
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attribute.Int("server.port", n))
	}
	return attrs
}

// endSpan records res on span and ends it; it returns the span's
// traceparent, which the attempt record carries to the attempt log. A
// 4xx or 5xx answer or a failed request is an error (the HTTP client
// semantic conventions), error.type being the status code or hookd's
// error class.
func endSpan(span trace.Span, res *result) string {
	if res.status > 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.status))
	}
	span.SetAttributes(attribute.String("hookd.outcome", string(res.verdict.Outcome)))
	switch {
	case res.status >= 400:
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(res.status)))
		span.SetStatus(codes.Error, "")
	case res.err != nil:
		class := res.verdict.ErrorClass
		if class == "" {
			class = "_OTHER"
		}
		span.SetAttributes(attribute.String("error.type", class))
		span.RecordError(res.err)
		span.SetStatus(codes.Error, res.err.Error())
	case res.verdict.Outcome != attempt.OutcomeDelivered: // a 3xx: never followed
		span.SetStatus(codes.Error, "not delivered: "+string(res.verdict.Outcome))
	}
	span.End()
	return tracing.Traceparent(span.SpanContext())
}

// setTraceparent sets the request's traceparent header to the span in ctx
// (the attempt's), for an endpoint that opted in; nothing when ctx has no
// valid span (tracing off).
func setTraceparent(ctx context.Context, h http.Header) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	h["Traceparent"] = []string{tracing.Traceparent(sc)}
	if ts := sc.TraceState().String(); ts != "" {
		h["Tracestate"] = []string{ts}
	}
}
