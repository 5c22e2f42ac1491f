package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Ordering over the API: create and update set it, answers always show it
// (none by default), and a bad one is a 400 naming ordering that writes
// nothing.
func TestEndpointOrderingOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ep endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com"}`, &ep))
	require.Equal(t, "none", ep.Ordering)
	var fifo endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints",
		`{"event_types":["*"],"url":"https://x.example.com","ordering":"fifo"}`, &fifo))
	require.Equal(t, "fifo", fifo.Ordering)

	var got endpointOut
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"ordering":"fifo"}`, &got))
	require.Equal(t, "fifo", got.Ordering)
	got = endpointOut{}
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"description":"only this"}`, &got))
	require.Equal(t, "fifo", got.Ordering, "a patch without ordering keeps it")
	got = endpointOut{}
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+fifo.ID, "", &got))
	require.Equal(t, "fifo", got.Ordering)

	url := `"event_types":["*"],"url":"https://x.example.com"`
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/endpoints", `{` + url + `,"ordering":"lifo"}`},
		{"POST", "/v1/endpoints", `{` + url + `,"ordering":"FIFO"}`},
		{"POST", "/v1/endpoints", `{` + url + `,"ordering":1}`},
		{"PATCH", "/v1/endpoints/" + ep.ID, `{"ordering":"strict"}`},
		{"PATCH", "/v1/endpoints/" + ep.ID, `{"ordering":""}`},
	} {
		before := b.state(t)
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %s: %s", c.method, c.body, e.Error.Message)
		require.Contains(t, e.Error.Message, "ordering", "%s %s", c.method, c.body)
		require.NotContains(t, e.Error.Message, "\n")
		require.Equal(t, before, b.state(t), "a refused request wrote something")
	}
}
