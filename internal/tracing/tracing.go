// Package tracing owns hookd's OpenTelemetry traces: it builds the tracer
// provider from the standard OTEL_* environment (off unless that
// environment asks for an exporter), carries W3C trace context in Kafka
// record headers between the stages, and flushes what is buffered when the
// process stops. Stages hold a trace.Tracer that is nil when tracing is
// off (see Active) and skip every tracing step on it, so a process without
// tracing pays one comparison per record. It never decides what a stage
// does with a record.
//
// Internal: only hookd's own packages can import it.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hookd/hookd/internal/version"
)

// ServiceName is the service.name of hookd's spans unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "hookd"

// Provider is the process's tracer provider: the SDK's when tracing is on,
// a no-op one when it is off.
type Provider struct {
	sdk *sdktrace.TracerProvider // nil when off
}

// Off is a Provider with tracing off.
var Off = &Provider{}

// Enabled reports whether the OTEL_* environment turns traces on: it does
// when OTEL_TRACES_EXPORTER is "otlp", or when it is unset and an OTLP
// endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn them off. Any other exporter is an error
// naming the variable: hookd ships the OTLP/HTTP exporter only.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported: use otlp (OTLP over HTTP) or none", exp)
	}
}

// Setup builds the Provider the process environment asks for (see
// Enabled). When on, spans are batched (OTEL_BSP_* tune it) and exported
// over OTLP/HTTP (OTEL_EXPORTER_OTLP_* configure it: endpoint, headers,
// TLS, compression, timeout), sampled as OTEL_TRACES_SAMPLER says
// (default parentbased_always_on: an application's sampling decision in
// its traceparent is kept). Export errors are logged on logger at WARN.
func Setup(ctx context.Context, logger *slog.Logger) (*Provider, error) {
	on, err := Enabled(os.Getenv)
	if err != nil || !on {
		return Off, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	p, err := New(ctx, exp)
	if err != nil {
		return nil, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "error", err.Error())
	}))
	logger.InfoContext(ctx, "tracing on: spans exported over OTLP/HTTP")
	return p, nil
}

// New is a Provider exporting through exp in batches, with the resource
// and sampler of the environment: Setup's provider with another exporter
// (tests, benchmarks).
func New(ctx context.Context, exp sdktrace.SpanExporter) (*Provider, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName), attribute.String("service.version", version.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: after, so they win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return &Provider{sdk: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// NewSync is a Provider exporting every span through exp as it ends: for
// tests with tracetest.InMemoryExporter.
func NewSync(exp sdktrace.SpanExporter) *Provider {
	return &Provider{sdk: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))}
}

// Enabled reports whether p records spans.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// Tracer returns the named tracer: a no-op tracer when tracing is off.
func (p *Provider) Tracer(name string) trace.Tracer {
	if !p.Enabled() {
		return noop.NewTracerProvider().Tracer(name)
	}
	return p.sdk.Tracer(name, trace.WithInstrumentationVersion(version.Version))
}

// Shutdown exports the spans still buffered and stops the exporter; ctx
// bounds it. Nothing to do when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Active returns t, or nil when t is nil or a no-op tracer. Stages keep
// what it returns and test it against nil before any tracing work: a no-op
// tracer would still read headers and allocate a context per record.
func Active(t trace.Tracer) trace.Tracer {
	if _, isNoop := t.(noop.Tracer); isNoop {
		return nil
	}
	return t
}
