package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// hookctl event-types: create from files and flags, list, show, update
// (including clearing), delete; a bad schema is a usage error naming the
// field.
func TestEventTypesCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	dir := t.TempDir()
	schema := filepath.Join(dir, "schema.json")
	require.NoError(t, os.WriteFile(schema, []byte(`{"type":"object","required":["invoice"]}`), 0o600))

	code, out, errOut := hookctl(t, db, "event-types", "create", "invoice.paid", "--description", "An invoice was paid.",
		"--schema-file", schema, "--example", `{"invoice":"in_1"}`, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var got struct {
		Name, Description string
		Schema, Example   json.RawMessage
		Deprecated        bool
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "invoice.paid", got.Name)
	require.JSONEq(t, `{"type":"object","required":["invoice"]}`, string(got.Schema))
	require.JSONEq(t, `{"invoice":"in_1"}`, string(got.Example))

	code, _, errOut = hookctl(t, db, "event-types", "create", "bad", "--schema", `{"type":"objekt"}`)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "schema: not a valid JSON Schema: at /type")
	code, _, errOut = hookctl(t, db, "event-types", "create", "invoice.paid")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "already exists")

	code, out, _ = hookctl(t, db, "event-types", "list")
	require.Equal(t, 0, code)
	require.Regexp(t, `invoice\.paid\s+yes\s+yes\s+-\s+An invoice was paid\.`, out)

	code, out, _ = hookctl(t, db, "event-types", "show", "invoice.paid")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Example:\n{\n  \"invoice\": \"in_1\"\n}")

	code, _, errOut = hookctl(t, db, "event-types", "update", "invoice.paid", "--example", `{}`)
	require.Equal(t, 2, code, "the example must match the schema")
	require.Contains(t, errOut, "example: does not match the schema")
	code, out, errOut = hookctl(t, db, "event-types", "update", "invoice.paid", "--no-example", "--deprecated", "-o", "json")
	require.Equal(t, 0, code, errOut)
	got.Example = nil
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Nil(t, got.Example)
	require.True(t, got.Deprecated)
	require.Equal(t, "An invoice was paid.", got.Description)

	code, _, _ = hookctl(t, db, "event-types", "delete", "invoice.paid")
	require.Equal(t, 0, code)
	code, _, errOut = hookctl(t, db, "event-types", "show", "invoice.paid")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not found")
}
