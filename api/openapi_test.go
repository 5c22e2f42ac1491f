package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/stretchr/testify/require"
)

// The document is OpenAPI 3.1 and valid against the specification's schema
// (the bogus keys of unquoted commas in flow mappings, for one, were not).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(OpenAPI())
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.GetVersion())
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	require.True(t, ok, "%s", describe(verrs))
	model, err := doc.BuildV3Model()
	require.NoError(t, err)
	// No description text leaked into a key (the issue's "7d)." and "in the
	// answer to create only.").
	for name, schema := range model.Model.Components.Schemas.FromOldest() {
		for prop := range schema.Schema().Properties.KeysFromOldest() {
			require.NotContains(t, prop, " ", "schema %s has property %q", name, prop)
			require.NotContains(t, prop, ")", "schema %s has property %q", name, prop)
		}
	}
}

// Before Attach, every authenticated operation answers 503 starting, as
// documented.
func TestOpenAPIDocumentsStarting(t *testing.T) {
	t.Parallel()
	api := NewV1(V1Config{AdminToken: adminToken}, nil)
	mux := http.NewServeMux()
	api.Routes(mux)
	srv := httptest.NewServer(validating(t, mux))
	t.Cleanup(srv.Close)
	var e apiError
	require.Equal(t, 503, call(t, srv.URL, adminToken, "GET", "/v1/endpoints", "", &e))
	require.Equal(t, "starting", e.Error.Code)
	require.Equal(t, 503, call(t, srv.URL, adminToken, "POST", "/v1/replays", `{"reason":"x"}`, &e))
	require.Equal(t, 200, call(t, srv.URL, "", "GET", "/v1/openapi.yaml", "", nil))
}

// The validating middleware itself fails on a drift: an undocumented
// status and a body that does not match its schema.
func TestValidatingMiddlewareCatchesDrift(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.HandlerFunc{
		"undocumented status": func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusTeapot, "teapot", "short and stout")
		},
		"wrong body": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"data":[{"id":7}]}`)
		},
		"valid request refused as a server error": func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusInternalServerError, "internal", "boom")
		},
	} {
		rec := &recordingTB{TB: t}
		rec.check(validating(rec, h), httptest.NewRequest("GET", "/v1/endpoints", nil))
		require.NotEmpty(t, rec.errors, name)
	}
	// And an invalid request that the server accepted.
	rec := &recordingTB{TB: t}
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ep_1"}`)
	}
	req := httptest.NewRequest("POST", "/v1/endpoints", strings.NewReader(`{"url":"https://x.example.com","bogus":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer x")
	rec.check(validating(rec, http.HandlerFunc(ok)), req)
	require.NotEmpty(t, rec.errors, "accepted an invalid request")
}

type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) check(h http.Handler, req *http.Request) {
	req.Header.Set("Authorization", "Bearer x")
	h.ServeHTTP(httptest.NewRecorder(), req)
}

var specValidator = sync.OnceValues(func() (validator.Validator, error) {
	doc, err := libopenapi.NewDocument(OpenAPI())
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return v, nil
})

var validateMu sync.Mutex

// errorReporter is what validating needs of a test.
type errorReporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// reporter passes errors on to the test it was last pointed to: a fuzz
// target must report on its own *testing.T, not the bundle's *testing.F.
type reporter struct {
	mu sync.Mutex
	tb errorReporter
}

func (r *reporter) to(tb errorReporter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tb = tb
}

func (r *reporter) Helper() {}

func (r *reporter) Errorf(format string, args ...any) {
	r.mu.Lock()
	tb := r.tb
	r.mu.Unlock()
	tb.Errorf(format, args...)
}

// validating wraps the API's handler so that every request and answer under
// /v1/ of a test is checked against openapi.yaml: the answer's status must
// be documented for the operation and its body must match the schema, and
// a request the document calls invalid must be refused with a 4xx.
func validating(t errorReporter, h http.Handler) http.Handler {
	v, err := specValidator()
	if err != nil {
		panic("loading openapi.yaml: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		if msg := checkExchange(v, r, body, rec); msg != "" {
			t.Errorf("openapi.yaml and the API disagree on %s %s %q -> %d %s:\n%s", r.Method, r.URL.RequestURI(), clipBody(body), rec.Code, clipBody(rec.Body.Bytes()), msg)
		}
	})
}

// checkExchange returns what is wrong with one request and its answer.
func checkExchange(v validator.Validator, r *http.Request, body []byte, rec *httptest.ResponseRecorder) string {
	validateMu.Lock() // the validator's caches are shared
	defer validateMu.Unlock()
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json") // what the API assumes
	}
	reqOK, reqErrs := v.ValidateHttpRequestSync(req)
	if !reqOK && isUnknownPath(reqErrs) {
		if rec.Code != http.StatusNotFound {
			return "an undocumented route answered " + fmt.Sprint(rec.Code)
		}
		return ""
	}
	if !reqOK && rec.Code < 400 {
		return "the document refuses the request, the API accepted it:\n" + describe(reqErrs)
	}
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		return "a server error"
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp := rec.Result()
	if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
		return "the answer does not match the document:\n" + describe(errs)
	}
	return ""
}

func isUnknownPath(errs []*verrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationSubType == helpers.ValidationMissing && e.ValidationType == helpers.PathValidation ||
			e.ValidationSubType == helpers.ValidationMissingOperation {
			return true
		}
	}
	return false
}

func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  %s/%s: %s: %s\n", e.ValidationType, e.ValidationSubType, e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "    %s: %s\n", se.FieldPath, se.Reason)
		}
	}
	return b.String()
}

func clipBody(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
