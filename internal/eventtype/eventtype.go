// Package eventtype owns the event-type catalogue: what a type is (a name,
// a description, a JSON Schema for the event's data, an example, a
// deprecated flag), the checks a type passes before it is stored, and
// Catalog, the in-memory copy the router validates events against. It
// never reads Postgres per event: Catalog is refreshed by LISTEN/NOTIFY.
package eventtype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Type is one entry of the catalogue.
type Type struct {
	// Name is the event type, as events carry it ("invoice.paid").
	Name        string `json:"name"`
	Description string `json:"description"`
	// Schema is a JSON Schema (draft 2020-12 unless it says otherwise) for
	// the event's data; nil when the type has none.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Example is an example of the event's data; nil when none.
	Example    json.RawMessage `json:"example,omitempty"`
	Deprecated bool            `json:"deprecated"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// Limits of a catalogue entry.
const (
	MaxNameLen        = 255
	MaxDescriptionLen = 4096
	// MaxDocLen caps a schema or an example (bytes of JSON).
	MaxDocLen = 64 << 10
)

// FieldError is a Type that cannot be stored; Field names the offending
// field as the API spells it.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Validate checks t before it is stored: a name an event can carry, a
// bounded description, a schema that compiles (and refers to nothing
// outside itself), and an example that is JSON and, with a schema, valid
// against it. The error is a *FieldError.
func (t *Type) Validate() error {
	switch {
	case t.Name == "" || len(t.Name) > MaxNameLen:
		return &FieldError{"name", fmt.Sprintf("must be 1 to %d bytes", MaxNameLen)}
	case strings.ContainsAny(t.Name, "*? \t\r\n") || !utf8.ValidString(t.Name):
		return &FieldError{"name", "must be a plain event type (no wildcards or spaces)"}
	case len(t.Description) > MaxDescriptionLen || !utf8.ValidString(t.Description):
		return &FieldError{"description", fmt.Sprintf("must be UTF-8 text of at most %d bytes", MaxDescriptionLen)}
	}
	var sch *Schema
	if isSet(t.Schema) {
		var err error
		if sch, err = Compile(t.Schema); err != nil {
			return &FieldError{"schema", err.Error()}
		}
	} else {
		t.Schema = nil
	}
	if !isSet(t.Example) {
		t.Example = nil
		return nil
	}
	if len(t.Example) > MaxDocLen || !json.Valid(t.Example) {
		return &FieldError{"example", fmt.Sprintf("must be JSON of at most %d bytes", MaxDocLen)}
	}
	if sch != nil {
		if err := sch.Validate(t.Example); err != nil {
			return &FieldError{"example", "does not match the schema: " + err.Error()}
		}
	}
	return nil
}

// isSet says whether a JSON field was given: absent and null are unset.
func isSet(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && !bytes.Equal(b, []byte("null"))
}

// Schema is a compiled JSON Schema.
type Schema struct{ s *jsonschema.Schema }

// refusingLoader refuses every $ref outside the schema: the library would
// read local files by default, and a schema is written by API users.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: only references inside the schema are allowed", url)
}

// schemaURL names every schema while it compiles (never fetched).
const schemaURL = "urn:hookd:event-type-schema"

// Compile compiles a JSON Schema document. Format keywords are
// annotations only, as draft 2020-12 says by default.
func Compile(doc []byte) (*Schema, error) {
	if len(doc) > MaxDocLen {
		return nil, fmt.Errorf("must be at most %d bytes", MaxDocLen)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		if _, ok := v.(bool); !ok {
			return nil, errors.New("must be a JSON object (or true or false)")
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, oneLine(err)
	}
	s, err := c.Compile(schemaURL)
	var (
		sve *jsonschema.SchemaValidationError
		ve  *jsonschema.ValidationError
	)
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) { // the library does not wrap it
		return nil, errors.New("not a valid JSON Schema: " + firstViolation(ve))
	}
	if err != nil {
		return nil, oneLine(err)
	}
	return &Schema{s: s}, nil
}

// Validate checks data (JSON) against s. The error names the first
// violation only, with where it is in data ("at /amount: got string,
// want number"), short enough for a dead-letter reason.
func (s *Schema) Validate(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("data is not JSON: %v", err)
	}
	err = s.s.Validate(v)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	return errors.New(firstViolation(ve))
}

// firstViolation renders the first leaf of a validation error tree, the
// most specific reason: "at /amount: got string, want number".
func firstViolation(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return fmt.Sprintf("at /%s: %s", strings.Join(ve.InstanceLocation, "/"), ve.ErrorKind.LocalizedString(printer))
}

var printer = message.NewPrinter(language.English)

// oneLine keeps the first line of a library error: compile errors can
// list nested causes over many lines.
func oneLine(err error) error {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return errors.New(strings.TrimSpace(strings.ReplaceAll(msg, schemaURL, "schema")))
}
