package eventtype_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
)

// Validate refuses what cannot be stored, naming the field.
func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		t     eventtype.Type
		field string
		msg   string
	}{
		{"empty name", eventtype.Type{}, "name", "1 to 255"},
		{"wildcard", eventtype.Type{Name: "invoice.*"}, "name", "wildcards"},
		{"schema not JSON", eventtype.Type{Name: "a", Schema: []byte(`{`)}, "schema", "not JSON"},
		{"schema an array", eventtype.Type{Name: "a", Schema: []byte(`[]`)}, "schema", "JSON object"},
		{"bad keyword", eventtype.Type{Name: "a", Schema: []byte(`{"type":"objekt"}`)}, "schema", "at /type"},
		{"bad pattern", eventtype.Type{Name: "a", Schema: []byte(`{"pattern":"("}`)}, "schema", "at /pattern"},
		{"file ref", eventtype.Type{Name: "a", Schema: []byte(`{"$ref":"file:///etc/passwd"}`)}, "schema", "only references inside the schema"},
		{"http ref", eventtype.Type{Name: "a", Schema: []byte(`{"$ref":"http://169.254.169.254/x"}`)}, "schema", "only references inside the schema"},
		{"example not JSON", eventtype.Type{Name: "a", Example: []byte(`{x}`)}, "example", "JSON"},
		{"example breaks schema", eventtype.Type{Name: "a", Schema: []byte(`{"required":["id"]}`), Example: []byte(`{}`)}, "example", "missing property 'id'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.t.Validate()
			var fe *eventtype.FieldError
			require.True(t, errors.As(err, &fe), "got %v", err)
			require.Equal(t, tc.field, fe.Field)
			require.Contains(t, fe.Msg, tc.msg)
			require.NotContains(t, err.Error(), "\n")
		})
	}
	ok := eventtype.Type{Name: "invoice.paid", Schema: []byte(`{"$defs":{"id":{"type":"string"}},"properties":{"id":{"$ref":"#/$defs/id"}}}`),
		Example: []byte(`{"id":"in_1"}`)}
	require.NoError(t, ok.Validate(), "a reference inside the schema is fine")
	null := eventtype.Type{Name: "x", Schema: []byte(`null`), Example: []byte(` null `)}
	require.NoError(t, null.Validate())
	require.Nil(t, null.Schema, "null is no schema")
	require.Nil(t, null.Example)
}

// The first violation is named with its place in the data.
func TestSchemaValidateFirstViolation(t *testing.T) {
	t.Parallel()
	s, err := eventtype.Compile([]byte(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"integer"}}}}`))
	require.NoError(t, err)
	require.NoError(t, s.Validate([]byte(`{"items":[1,2]}`)))
	require.EqualError(t, s.Validate([]byte(`{"items":[1,"2"]}`)), "at /items/1: got string, want integer")
	require.ErrorContains(t, s.Validate([]byte(`{"items":`)), "not JSON")
}

// A Catalog loads the catalogue, validates from memory, and follows
// changes through NOTIFY: a schema added, then the type deleted.
func TestCatalogFollowsChanges(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cat, err := eventtype.NewCatalog(eventtype.CatalogConfig{ResyncInterval: time.Hour}, db.Store, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- cat.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.NoError(t, cat.WaitReady(ctx))

	bad := []byte(`{"amount":"1"}`)
	require.NoError(t, cat.Validate("invoice.paid", bad), "not in the catalogue: anything goes")
	_, err = db.Store.CreateEventType(ctx, eventtype.Type{Name: "invoice.paid", Schema: []byte(`{"properties":{"amount":{"type":"number"}}}`)})
	require.NoError(t, err)
	wait.For(t, 10*time.Second, "the catalog to load the schema", func() bool { return cat.Validate("invoice.paid", bad) != nil })
	require.NoError(t, cat.Validate("invoice.paid", []byte(`{"amount":1}`)))
	require.NoError(t, db.Store.DeleteEventType(ctx, "invoice.paid"))
	wait.For(t, 10*time.Second, "the catalog to drop the type", func() bool { return cat.Validate("invoice.paid", bad) == nil })
}
