package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serve runs one request through the API's handler (no socket) and
// returns the status and body.
func (b *bundle) serve(token, method, path, body string) (int, []byte) {
	rec := b.serveRec(token, method, path, body)
	return rec.Code, rec.Body.Bytes()
}

func (b *bundle) serveRec(token, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	b.srv.Config.Handler.ServeHTTP(rec, req)
	return rec
}

// checkAnswer fails on a 5xx, a body that is not JSON, or an error
// without a one-line message.
func checkAnswer(t *testing.T, what, body string, code int, raw []byte) {
	t.Helper()
	if code >= 500 {
		t.Fatalf("%s %q: %d %s", what, body, code, raw)
	}
	if !json.Valid(raw) {
		t.Fatalf("%s %q: %d with a non-JSON body %q", what, body, code, raw)
	}
	if code >= 400 {
		var e apiError
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" || e.Error.Message == "" || strings.Contains(e.Error.Message, "\n") {
			t.Fatalf("%s %q: %d with a bad error body %q", what, body, code, raw)
		}
	}
}

// FuzzEndpointBodies posts arbitrary bodies to create and patch against a
// real store: never a 5xx or a panic, and a refused request writes
// nothing (no endpoint created, the patched one unchanged).
func FuzzEndpointBodies(f *testing.F) {
	for _, s := range []string{
		`{"url":"https://x.example.com/hook","event_types":["invoice.*"],"description":"d","max_in_flight":4,"timeout_ms":5000,"rate_per_sec":2.5}`,
		`{"url":"https://x.example.com/hook","timeout_ms":3000000000}`, `{"url":"https://x.example.com","max_in_flight":4294967297}`,
		`{"url":"https://x.example.com","description":"a\u0000b"}`, `{"url":"http://10.0.0.1/"}`, `{"url":"http://[::ffff:0:a9fe:a9fe]/"}`,
		`{"url":"https://x.example.com","id":"ep_x","account":"acct_a"}`, `{"url":"https://x.example.com"}}`, `{"status":"disabled"}`,
		`{"url":"https://x.example.com","secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, `{"event_types":["a..b"]}`, `[]`, `null`, ``,
		`{"url":"https://x.example.com","rate_per_sec":1e309}`, `{"description":"` + strings.Repeat("é", 600) + `"}`,
		`{"url":"http://0x7f.1/"}`, `{"url":"https://internal.example.com/"}`, `{"url":"https://x.example.com","event_types":[null]}`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body string, admin bool) {
		b.reporter.to(t)
		token := b.tokA
		if admin {
			token = adminToken
		}
		before := b.state(t)
		rec := b.serveRec(token, "POST", "/v1/endpoints", body)
		code, raw := rec.Code, rec.Body.Bytes()
		checkAnswer(t, "create", body, code, raw)
		if code == http.StatusCreated {
			var ep endpointOut
			if err := json.Unmarshal(raw, &ep); err != nil || ep.ID == "" {
				t.Fatalf("create %q: 201 without an endpoint: %s", body, raw)
			}
			loc := rec.Header().Get("Location")
			var got endpointOut
			if c, raw := b.serve(adminToken, "GET", loc, ""); c != http.StatusOK || json.Unmarshal(raw, &got) != nil || got.ID != ep.ID {
				t.Fatalf("create %q: 201 but GET %s (Location) answers %d %s", body, loc, c, raw)
			}
			if c, _ := b.serve(adminToken, "DELETE", loc, ""); c != http.StatusNoContent {
				t.Fatalf("delete %s: %d", loc, c)
			}
		} else if after := b.state(t); !sameState(before, after) {
			t.Fatalf("create %q answered %d but wrote something", body, code)
		}

		old, err := b.db.Store.GetEndpoint(context.Background(), b.epA)
		if err != nil {
			t.Fatal(err)
		}
		code, raw = b.serve(token, "PATCH", "/v1/endpoints/"+b.epA, body)
		checkAnswer(t, "patch", body, code, raw)
		now, err := b.db.Store.GetEndpoint(context.Background(), b.epA)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK && !now.UpdatedAt.Equal(old.UpdatedAt) {
			t.Fatalf("patch %q answered %d but changed the endpoint", body, code)
		}
	})
}

func sameState(a, b state) bool {
	if a.replays != b.replays || len(a.endpoints) != len(b.endpoints) {
		return false
	}
	for i := range a.endpoints {
		if a.endpoints[i].ID != b.endpoints[i].ID || !a.endpoints[i].UpdatedAt.Equal(b.endpoints[i].UpdatedAt) {
			return false
		}
	}
	return true
}

// FuzzReplayBodies posts arbitrary bodies to replay and resend against a
// real store and broker: never a 5xx or a panic; a refused request writes
// no replay row, and a 202's location exists.
func FuzzReplayBodies(f *testing.F) {
	for _, s := range []string{
		`{"reason":"INC-1","dry_run":true}`, `{"reason":"INC-1","filter":{"event_type":"invoice.*","since":"24h"},"limit":10,"rate":5}`,
		`{"reason":"a\u0000b"}`, `{"reason":"x","actor":"\u0000"}`, `{"reason":"x","filter":{"account":"acct_b"}}`,
		`{"reason":"x","filter":{"endpoint":"ep\u0000"}}`, `{"reason":"x","limit":-1}`, `{"reason":"x","rate":-1}`,
		`{"reason":"x","id":"rpl bad"}`, `{"reason":"x","filter":{"since":"soon"}}`, `{"since":"1h","dry_run":true}`,
		`{"since":"1h","until":"2h"}`, `{"reason":"x"} {}`, `{"reason":"` + strings.Repeat("r", 2000) + `"}`, `{"reason":5}`,
		`{"reason":"x","filter":{"since":"2026-01-01T00:00:00Z","until":"2025-01-01T00:00:00Z"},"dry_run":true}`,
		`{"reason":"x","filter":{"dlq_reason":"\u00ff"},"dry_run":true}`, `{"reason":"x","limit":9223372036854775807,"dry_run":true}`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	b := setup(f)
	// Accepted replays stop at once (interrupted, resumable): the target
	// is the handler, and thousands of background runs would only pile
	// up on the broker.
	b.cancelReplays()
	f.Fuzz(func(t *testing.T, body string, resend bool) {
		b.reporter.to(t)
		path := "/v1/replays"
		if resend {
			path = "/v1/endpoints/" + b.epA + "/resend"
		}
		before := b.state(t)
		code, raw := b.serve(b.tokA, "POST", path, body)
		checkAnswer(t, path, body, code, raw)
		switch {
		case code == http.StatusAccepted:
			var started struct{ Location string }
			if err := json.Unmarshal(raw, &started); err != nil || started.Location == "" {
				t.Fatalf("%s %q: 202 without a location: %s", path, body, raw)
			}
			if c, got := b.serve(b.tokA, "GET", started.Location, ""); c != http.StatusOK {
				t.Fatalf("%s %q: 202 but %s answers %d %s", path, body, started.Location, c, got)
			}
		case code >= 400:
			if after := b.state(t); after.replays != before.replays {
				t.Fatalf("%s %q answered %d but wrote a replay row", path, body, code)
			}
		}
	})
}
