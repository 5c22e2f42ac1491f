package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// FromTraceparent's hand-read form and Traceparent's output agree with
// the W3C propagator, byte for byte; what the fast path refuses falls to
// the propagator (e.g. a future version with more fields).
func FuzzTraceparent(f *testing.F) {
	for _, s := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "", "garbage",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tp string) {
		got := trace.SpanContextFromContext(FromTraceparent(context.Background(), tp, ""))
		want := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier{Header: tp}))
		if !got.Equal(want) {
			t.Fatalf("FromTraceparent(%q) = %v, the propagator says %v", tp, got, want)
		}
		if !want.IsValid() {
			return
		}
		c := propagation.MapCarrier{}
		w3c.Inject(trace.ContextWithSpanContext(context.Background(), want), c)
		if s := Traceparent(want); s != c[Header] {
			t.Fatalf("Traceparent(%v) = %q, the propagator writes %q", want, s, c[Header])
		}
	})
}

func TestTraceparentAllocations(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := trace.SpanContextFromContext(FromTraceparent(context.Background(), tp, ""))
	if got := Traceparent(sc); got != tp {
		t.Fatalf("round trip: %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Traceparent(sc) }); n != 1 {
		t.Fatalf("Traceparent: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = FromTraceparent(context.Background(), tp, "") }); n > 2 {
		t.Fatalf("FromTraceparent: %v allocations, want at most 2 (the context and its span)", n)
	}
}

// Enabled follows the OTEL_* environment: off by default.
func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on, err bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
	} {
		on, err := Enabled(func(k string) string { return c.env[k] })
		if on != c.on || (err != nil) != c.err {
			t.Errorf("%v: on %v, error %v", c.env, on, err)
		}
	}
}
