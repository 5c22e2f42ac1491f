package portal

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/hookd/hookd/internal/eventtype"
)

// The event-type catalogue in the portal: a page listing every type with
// its description, JSON Schema and example; the endpoint settings form
// offers the types as checkboxes (free patterns still in the text box);
// the test-event form offers them as suggestions, and a test event of a
// catalogued type carries the type's example as its data.

// catalogEntry is one type as the catalogue page shows it.
type catalogEntry struct {
	eventtype.Type
	// SchemaText and ExampleText are indented JSON, empty when none.
	SchemaText, ExampleText string
}

func (h *Handler) catalogPage(w http.ResponseWriter, r *http.Request, s *session) error {
	types, err := h.store().ListEventTypes(r.Context())
	if err != nil {
		return err
	}
	entries := make([]catalogEntry, len(types))
	for i, t := range types {
		entries[i] = catalogEntry{Type: t}
		if len(t.Schema) > 0 {
			entries[i].SchemaText = indentJSON(t.Schema)
		}
		if len(t.Example) > 0 {
			entries[i].ExampleText = indentJSON(t.Example)
		}
	}
	return h.render(w, r, http.StatusOK, "event_types", view{Title: "Event types", Nav: "event-types", S: s, Data: entries})
}

// catalogChoice is a catalogued type offered by the endpoint settings form.
type catalogChoice struct {
	Name, Description string
	Deprecated        bool
	// Subscribed: the endpoint lists exactly this type.
	Subscribed bool
}

// catalogChoices offers every catalogued type, ticking those subscribed,
// and returns the endpoint's other types and patterns ("invoice.*", a type
// not in the catalogue) for the free-text box.
func (h *Handler) catalogChoices(ctx context.Context, subscribed []string) ([]catalogChoice, []string, error) {
	types, err := h.store().ListEventTypes(ctx)
	if err != nil {
		return nil, nil, err
	}
	choices := make([]catalogChoice, len(types))
	known := make(map[string]bool, len(types))
	for i, t := range types {
		known[t.Name] = true
		choices[i] = catalogChoice{Name: t.Name, Description: t.Description, Deprecated: t.Deprecated,
			Subscribed: slices.Contains(subscribed, t.Name)}
	}
	var free []string
	for _, p := range subscribed {
		if !known[p] {
			free = append(free, p)
		}
	}
	return choices, free, nil
}

// formTypes are the event types of the settings form: the ticked
// catalogue types, then the free-text ones, each once.
func formTypes(r *http.Request) []string {
	out := []string{}
	for _, t := range append(r.PostForm["event_type"], splitTypes(r.PostFormValue("event_types"))...) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// testData is the data of a test event of eventType: the catalogue's
// example for it, or else a note saying where the test came from.
func (h *Handler) testData(ctx context.Context, eventType, actor string) ([]byte, error) {
	t, err := h.store().GetEventType(ctx, eventType)
	if err == nil && len(t.Example) > 0 {
		return t.Example, nil
	}
	return json.Marshal(map[string]any{"test": true, "sent_from": "the " + h.cfg.Name + " delivery portal", "sent_by": actor})
}
