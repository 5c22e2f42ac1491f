package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Custom headers over the API: create and update accept them, every
// answer shows them ({} when none), {} clears them, and a bad or reserved
// header is a 400 naming it that writes nothing.
func TestEndpointHeadersOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ep endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints",
		`{"event_types":["*"],"url":"https://x.example.com","headers":{"X-Tenant":"acme","Authorization":"Bearer t"}}`, &ep))
	require.Equal(t, map[string]string{"X-Tenant": "acme", "Authorization": "Bearer t"}, ep.Headers)
	var got endpointOut
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+ep.ID, "", &got))
	require.Equal(t, ep.Headers, got.Headers)

	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"description":"only this"}`, &got))
	require.Equal(t, ep.Headers, got.Headers, "a patch without headers keeps them")
	got = endpointOut{} // json.Unmarshal would merge into the map
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"headers":{"X-Region":"eu"}}`, &got))
	require.Equal(t, map[string]string{"X-Region": "eu"}, got.Headers, "a patch replaces them all")
	got = endpointOut{}
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"headers":{}}`, &got))
	require.Equal(t, map[string]string{}, got.Headers)
	var raw map[string]any
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+b.epA, "", &raw))
	require.Equal(t, map[string]any{}, raw["headers"], "an endpoint without headers shows {}")

	url := `"event_types":["*"],"url":"https://x.example.com"`
	patch := "/v1/endpoints/" + ep.ID
	many := make([]string, 21)
	for i := range many {
		many[i] = `"X-` + strings.Repeat("a", i+1) + `":"v"`
	}
	cases := []struct{ method, path, body, want string }{
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{"Webhook-Signature":"v1,x"}}`, "Webhook-Signature is reserved"},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{"host":"a","X-Ok":"b","content-type":"c"}}`, "content-type, host are reserved"},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{"Transfer-Encoding":"chunked"}}`, "Transfer-Encoding is reserved"},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{"X-A":"a\r\nX-B: b"}}`, "headers: value of X-A"},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{"X A":"a"}}`, `headers: name "X A"`},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{` + strings.Join(many, ",") + `}}`, "headers: at most 20, got 21"},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":{"X-A":5}}`, "headers"},
		{"POST", "/v1/endpoints", `{` + url + `,"headers":["X-A: b"]}`, "headers"},
		{"PATCH", patch, `{"headers":{"User-Agent":"me"}}`, "User-Agent is reserved"},
		{"PATCH", patch, `{"headers":{"Proxy-Authorization":"x"}}`, "Proxy-Authorization is reserved"},
		{"PATCH", patch, `{"headers":{"X-A":"` + strings.Repeat("v", 1025) + `"}}`, "headers: value of X-A: at most 1024 bytes"},
		{"PATCH", patch, `{"headers":{"X-A":"\u0000"}}`, "headers: value of X-A"},
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
