package dispatcher

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// endSpan follows the HTTP client conventions: a 2xx is unset, a 4xx or
// 5xx an error with the status as error.type, a failed request an error
// with hookd's class, a 3xx (never followed) an error without
// error.type; it returns the span's traceparent.
func TestEndSpanStatus(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("t")
	for _, c := range []struct {
		name    string
		status  int
		err     error
		code    codes.Code
		errType string
	}{
		{"delivered", 204, nil, codes.Unset, ""},
		{"server error", 503, nil, codes.Error, "503"},
		{"client error", 404, nil, codes.Error, "404"},
		{"redirect", 302, nil, codes.Error, ""},
		{"refused", 0, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), codes.Error, ClassConnectRefused},
	} {
		res := result{status: c.status, err: c.err}
		res.verdict = Classify(c.status, c.err, 0, 0)
		if c.err != nil {
			res.verdict.ErrorClass = ClassConnectRefused
		}
		_, span := tracer.Start(context.Background(), c.name)
		tp := endSpan(span, &res)
		ended := rec.Ended()
		s := ended[len(ended)-1]
		if s.Status().Code != c.code {
			t.Errorf("%s: status %v, want %v", c.name, s.Status().Code, c.code)
		}
		attrs := attribute.NewSet(s.Attributes()...)
		if v, _ := attrs.Value("error.type"); v.AsString() != c.errType {
			t.Errorf("%s: error.type %q, want %q", c.name, v.AsString(), c.errType)
		}
		if v, ok := attrs.Value("http.response.status_code"); ok != (c.status > 0) || ok && v.AsInt64() != int64(c.status) {
			t.Errorf("%s: http.response.status_code %v (set %v)", c.name, v.AsInt64(), ok)
		}
		if tp == "" || tp[3:35] != s.SpanContext().TraceID().String() || tp[36:52] != s.SpanContext().SpanID().String() {
			t.Errorf("%s: traceparent %q is not the span's", c.name, tp)
		}
	}
}

// url.full leaves out the user info and the query string.
func TestURLAttributes(t *testing.T) {
	t.Parallel()
	attrs := attribute.NewSet(appendURLAttributes(nil, "https://user:pw@hooks.example.com/in/x?token=secret")...)
	for k, want := range map[attribute.Key]any{"url.full": "https://hooks.example.com/in/x", "server.address": "hooks.example.com",
		"server.port": int64(443)} {
		if v, _ := attrs.Value(k); v.AsInterface() != want {
			t.Errorf("%s = %v, want %v", k, v.AsInterface(), want)
		}
	}
}
