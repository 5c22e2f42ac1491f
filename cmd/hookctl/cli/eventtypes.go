package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/store"
)

// EventTypesCmd groups the event-type catalogue commands.
type EventTypesCmd struct {
	List   EventTypesListCmd   `cmd:"" help:"List the event-type catalogue."`
	Show   EventTypesShowCmd   `cmd:"" help:"Show one event type with its JSON Schema and example."`
	Create EventTypesCreateCmd `cmd:"" help:"Add an event type (the schema must be valid JSON Schema; the example must match it)."`
	Update EventTypesUpdateCmd `cmd:"" help:"Change an event type's description, schema, example or deprecated flag."`
	Delete EventTypesDeleteCmd `cmd:"" help:"Remove an event type from the catalogue (subscriptions to it are kept)."`
}

// EventTypeDocs are the schema and example flags shared by create and
// update: JSON given inline or read from a file.
type EventTypeDocs struct {
	Description *string `name:"description" help:"What the event means."`
	Schema      string  `name:"schema" xor:"schema" help:"JSON Schema of the event's data, as JSON text."`
	SchemaFile  string  `name:"schema-file" xor:"schema" type:"existingfile" help:"Read the JSON Schema from this file."`
	Example     string  `name:"example" xor:"example" help:"Example of the event's data, as JSON text (sent by the portal's Send test event)."`
	ExampleFile string  `name:"example-file" xor:"example" type:"existingfile" help:"Read the example from this file."`
	Deprecated  bool    `name:"deprecated" help:"Mark the type deprecated."`
}

// doc returns the JSON of an inline flag or a file, nil when neither.
func doc(inline, file, flag string) (json.RawMessage, error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, Usage(fmt.Errorf("--%s-file: %w", flag, err))
		}
		return b, nil
	case inline != "":
		return json.RawMessage(inline), nil
	}
	return nil, nil
}

// apply sets the fields given on t.
func (d EventTypeDocs) apply(t *eventtype.Type) error {
	if d.Description != nil {
		t.Description = *d.Description
	}
	schema, err := doc(d.Schema, d.SchemaFile, "schema")
	if err != nil {
		return err
	}
	example, err := doc(d.Example, d.ExampleFile, "example")
	if err != nil {
		return err
	}
	if schema != nil {
		t.Schema = schema
	}
	if example != nil {
		t.Example = example
	}
	if d.Deprecated {
		t.Deprecated = true
	}
	return nil
}

// eventTypeError makes bad input, unknown and taken names usage errors
// (exit 2).
func eventTypeError(err error) error {
	var fe *eventtype.FieldError
	if errors.As(err, &fe) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAlreadyExists) {
		return Usage(err)
	}
	return err
}

func printEventType(g *Globals, t eventtype.Type) error {
	if g.JSON() {
		return g.PrintJSON(t)
	}
	tw := g.Table()
	fmt.Fprintf(tw, "Name:\t%s\n", t.Name)
	fmt.Fprintf(tw, "Description:\t%s\n", t.Description)
	fmt.Fprintf(tw, "Deprecated:\t%t\n", t.Deprecated)
	fmt.Fprintf(tw, "Updated:\t%s\n", t.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range []struct {
		title string
		raw   json.RawMessage
	}{{"Schema", t.Schema}, {"Example", t.Example}} {
		if len(d.raw) == 0 {
			fmt.Fprintf(g.Out(), "%s: none\n", d.title)
			continue
		}
		var v any
		if err := json.Unmarshal(d.raw, &v); err != nil {
			return err
		}
		out, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintf(g.Out(), "%s:\n%s\n", d.title, out)
	}
	return nil
}

// EventTypesListCmd lists the catalogue.
type EventTypesListCmd struct{}

// Run implements `hookctl event-types list`.
func (c *EventTypesListCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	types, err := st.ListEventTypes(ctx)
	if err != nil {
		return err
	}
	if g.JSON() {
		if types == nil {
			types = []eventtype.Type{}
		}
		return g.PrintJSON(types)
	}
	tw := g.Table()
	fmt.Fprintln(tw, "NAME\tSCHEMA\tEXAMPLE\tDEPRECATED\tDESCRIPTION")
	yes := map[bool]string{true: "yes", false: "-"}
	for _, t := range types {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, yes[len(t.Schema) > 0], yes[len(t.Example) > 0], yes[t.Deprecated], t.Description)
	}
	return tw.Flush()
}

// EventTypesShowCmd shows one type.
type EventTypesShowCmd struct {
	Name string `arg:"" help:"Event type name."`
}

// Run implements `hookctl event-types show`.
func (c *EventTypesShowCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	t, err := st.GetEventType(ctx, c.Name)
	if err != nil {
		return eventTypeError(err)
	}
	return printEventType(g, t)
}

// EventTypesCreateCmd adds a type.
type EventTypesCreateCmd struct {
	Name string `arg:"" help:"Event type name, e.g. invoice.paid (no wildcards)."`
	EventTypeDocs
}

// Run implements `hookctl event-types create`.
func (c *EventTypesCreateCmd) Run(ctx context.Context, g *Globals) error {
	t := eventtype.Type{Name: c.Name}
	if err := c.apply(&t); err != nil {
		return err
	}
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	t, err = st.CreateEventType(ctx, t)
	if err != nil {
		return eventTypeError(err)
	}
	return printEventType(g, t)
}

// EventTypesUpdateCmd changes a type.
type EventTypesUpdateCmd struct {
	Name string `arg:"" help:"Event type name."`
	EventTypeDocs
	NoSchema      bool `name:"no-schema" xor:"schema" help:"Remove the schema."`
	NoExample     bool `name:"no-example" xor:"example" help:"Remove the example."`
	NotDeprecated bool `name:"not-deprecated" help:"Clear the deprecated flag."`
}

// Run implements `hookctl event-types update`.
func (c *EventTypesUpdateCmd) Run(ctx context.Context, g *Globals) error {
	if c.Deprecated && c.NotDeprecated {
		return Usage(errors.New("--deprecated and --not-deprecated contradict each other"))
	}
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	t, err := st.ModifyEventType(ctx, c.Name, func(t *eventtype.Type) error {
		if c.NoSchema {
			t.Schema = nil
		}
		if c.NoExample {
			t.Example = nil
		}
		if c.NotDeprecated {
			t.Deprecated = false
		}
		return c.apply(t)
	})
	if err != nil {
		return eventTypeError(err)
	}
	return printEventType(g, t)
}

// EventTypesDeleteCmd removes a type.
type EventTypesDeleteCmd struct {
	Name string `arg:"" help:"Event type name."`
}

// Run implements `hookctl event-types delete`.
func (c *EventTypesDeleteCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.DeleteEventType(ctx, c.Name); err != nil {
		return eventTypeError(err)
	}
	if g.JSON() {
		return g.PrintJSON(map[string]any{"name": c.Name, "deleted": true})
	}
	fmt.Fprintf(g.Out(), "deleted event type %s\n", c.Name)
	return nil
}
