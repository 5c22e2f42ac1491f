package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Payload filters over the API: create and update accept one, answers show
// it (left out when none), null and {} remove it, and a bad one is a 400
// naming its place in the filter that writes nothing.
func TestEndpointFilterOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := `{"type":{"$prefix":"invoice."},"data":{"amount":{"$gte":100}}}`
	var ep endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints",
		`{"event_types":["*"],"url":"https://x.example.com","filter":`+f+`}`, &ep))
	require.JSONEq(t, f, string(ep.Filter))
	var got endpointOut
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+ep.ID, "", &got))
	require.JSONEq(t, f, string(got.Filter))

	got = endpointOut{}
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"description":"only this"}`, &got))
	require.JSONEq(t, f, string(got.Filter), "a patch without a filter keeps it")
	got = endpointOut{}
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"filter":{"id":"evt_1"}}`, &got))
	require.JSONEq(t, `{"id":"evt_1"}`, string(got.Filter))
	for _, clear := range []string{`{"filter":null}`, `{"filter":{}}`} {
		require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"filter":{"id":"evt_1"}}`, nil))
		var raw map[string]any
		require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, clear, &raw))
		require.NotContains(t, raw, "filter", "%s removes the filter", clear)
	}

	url := `"event_types":["*"],"url":"https://x.example.com"`
	patch := "/v1/endpoints/" + ep.ID
	cases := []struct{ method, path, body, want string }{
		{"POST", "/v1/endpoints", `{` + url + `,"filter":{"amount":1}}`, "filter.amount: unknown field"},
		{"POST", "/v1/endpoints", `{` + url + `,"filter":{"data":{"a":{"$regex":"x"}}}}`, "filter.data.a.$regex: unknown operator"},
		{"POST", "/v1/endpoints", `{` + url + `,"filter":{"created":{"$gt":"today"}}}`, "filter.created.$gt: must be an RFC 3339 time"},
		{"POST", "/v1/endpoints", `{` + url + `,"filter":[1]}`, "filter"},
		{"PATCH", patch, `{"filter":{"type":{"$in":"a"}}}`, "filter.type.$in: must be an array"},
		{"PATCH", patch, `{"filter":{"$or":[]}}`, "filter.$or: must be a non-empty array"},
		{"PATCH", patch, `{"filter":"x"}`, "filter"},
	}
	before := b.state(t)
	for _, c := range cases {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %.120s: %s", c.method, c.body, e.Error.Message)
		require.Contains(t, e.Error.Message, c.want, "%s %.120s", c.method, c.body)
		require.NotContains(t, e.Error.Message, "\n")
	}
	require.Equal(t, before, b.state(t), "a refused request wrote something")
}
