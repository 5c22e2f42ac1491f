package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The catalogue over the API: the admin token creates, changes and
// deletes; an account token reads and gets 403 on writes; schemas are
// checked at create time (400 naming the field); every answer matches
// openapi.yaml (the validating middleware).
func TestEventTypesOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var e apiError
	body := `{"name":"invoice.paid","description":"An invoice was paid.",
		"schema":{"type":"object","required":["invoice"],"properties":{"invoice":{"type":"string"}}},
		"example":{"invoice":"in_1"}}`
	require.Equal(t, 403, b.do(t, b.tokA, "POST", "/v1/event-types", body, &e))
	require.Equal(t, "forbidden", e.Error.Code)

	var got map[string]any
	require.Equal(t, 201, b.do(t, adminToken, "POST", "/v1/event-types", body, &got))
	require.Equal(t, "invoice.paid", got["name"])
	require.Equal(t, map[string]any{"invoice": "in_1"}, got["example"])
	require.Equal(t, 409, b.do(t, adminToken, "POST", "/v1/event-types", body, &e))

	for _, tc := range []struct{ body, msg string }{
		{`{"name":"a","schema":{"type":"objekt"}}`, "schema: not a valid JSON Schema: at /type"},
		{`{"name":"a","schema":{"$ref":"file:///etc/passwd"}}`, "schema: "},
		{`{"name":"a","schema":{"required":["x"]},"example":{}}`, "example: does not match the schema: at /: missing property 'x'"},
		{`{"name":"a.*"}`, "name: must be a plain event type"},
		{`{"description":"no name"}`, "name: "},
	} {
		require.Equal(t, 400, b.do(t, adminToken, "POST", "/v1/event-types", tc.body, &e), tc.body)
		require.Contains(t, e.Error.Message, tc.msg, tc.body)
	}

	var list struct{ Data []map[string]any }
	require.Equal(t, 200, b.do(t, b.tokB, "GET", "/v1/event-types", "", &list))
	require.Len(t, list.Data, 1, "every account reads the one catalogue")
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/event-types/invoice.paid", "", &got))
	require.Equal(t, "An invoice was paid.", got["description"])

	require.Equal(t, 403, b.do(t, b.tokA, "PATCH", "/v1/event-types/invoice.paid", `{"deprecated":true}`, &e))
	got = nil // a decoded map keeps the keys it had
	require.Equal(t, 200, b.do(t, adminToken, "PATCH", "/v1/event-types/invoice.paid", `{"deprecated":true,"example":null}`, &got))
	require.Equal(t, true, got["deprecated"])
	require.NotContains(t, got, "example", "null cleared it")
	require.Equal(t, "An invoice was paid.", got["description"], "absent fields are kept")
	require.Equal(t, 400, b.do(t, adminToken, "PATCH", "/v1/event-types/invoice.paid", `{"example":{"invoice":7}}`, &e))
	require.Contains(t, e.Error.Message, "example: does not match the schema: at /invoice")
	require.Equal(t, 404, b.do(t, adminToken, "PATCH", "/v1/event-types/nope", `{}`, &e))

	require.Equal(t, 403, b.do(t, b.tokA, "DELETE", "/v1/event-types/invoice.paid", "", &e))
	require.Equal(t, 204, b.do(t, adminToken, "DELETE", "/v1/event-types/invoice.paid", "", nil))
	require.Equal(t, 404, b.do(t, b.tokA, "GET", "/v1/event-types/invoice.paid", "", &e))
	require.Equal(t, 404, b.do(t, adminToken, "DELETE", "/v1/event-types/invoice.paid", "", &e))
}
