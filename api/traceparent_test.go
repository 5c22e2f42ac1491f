package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// send_traceparent over the API: off unless asked for, set at create,
// kept by a patch without it, changed by one with it; a value that is not
// a boolean is a 400 naming the field that writes nothing.
func TestEndpointSendTraceparentOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var raw map[string]any
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+b.epA, "", &raw))
	require.Equal(t, false, raw["send_traceparent"], "off by default, and shown")

	var ep endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints",
		`{"event_types":["*"],"url":"https://x.example.com","send_traceparent":true}`, &ep))
	require.True(t, ep.SendTraceparent)
	var got endpointOut
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"description":"only this"}`, &got))
	require.True(t, got.SendTraceparent, "a patch without it keeps it")
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"send_traceparent":false}`, &got))
	require.False(t, got.SendTraceparent)
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+ep.ID, "", &got))
	require.False(t, got.SendTraceparent)

	before := b.state(t)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com","send_traceparent":"yes"}`},
		{"PATCH", "/v1/endpoints/" + ep.ID, `{"send_traceparent":1}`},
	} {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %s", c.method, c.body)
		require.Contains(t, e.Error.Message, "send_traceparent", "%s %s", c.method, c.body)
	}
	require.Equal(t, before, b.state(t), "a refused request wrote something")
}
