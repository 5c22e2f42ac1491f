package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/store"
)

// The event-type catalogue is one per deployment: every token reads it
// (an account's developers need the schemas), only the admin (operator)
// token changes it, since one account's edit would change what every
// account is sent and validated against.

type eventTypeIn struct {
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Example     json.RawMessage `json:"example"`
	Deprecated  *bool           `json:"deprecated"`
}

// apply sets the fields given: on PATCH, an absent field keeps its value
// and null clears a schema or an example.
func (in *eventTypeIn) apply(t *eventtype.Type) {
	if in.Description != nil {
		t.Description = *in.Description
	}
	if in.Schema != nil {
		t.Schema = in.Schema
	}
	if in.Example != nil {
		t.Example = in.Example
	}
	if in.Deprecated != nil {
		t.Deprecated = *in.Deprecated
	}
}

// operatorOnly answers 403 to an account token.
func operatorOnly(w http.ResponseWriter, c caller) bool {
	if c.admin {
		return true
	}
	writeError(w, http.StatusForbidden, "forbidden", "only the admin token changes the event-type catalogue (it is shared by every account)")
	return false
}

func (s *V1) listEventTypes(w http.ResponseWriter, r *http.Request, _ caller) {
	be, _ := s.backend()
	types, err := be.Store.ListEventTypes(r.Context())
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if types == nil {
		types = []eventtype.Type{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": types})
}

func (s *V1) getEventType(w http.ResponseWriter, r *http.Request, _ caller) {
	be, _ := s.backend()
	t, err := be.Store.GetEventType(r.Context(), r.PathValue("id"))
	s.writeEventType(w, r, http.StatusOK, t, err)
}

func (s *V1) createEventType(w http.ResponseWriter, r *http.Request, c caller) {
	if !operatorOnly(w, c) {
		return
	}
	be, _ := s.backend()
	var in eventTypeIn
	if !decode(w, r, &in) {
		return
	}
	t := eventtype.Type{Name: in.Name}
	in.apply(&t)
	t, err := be.Store.CreateEventType(r.Context(), t)
	if errors.Is(err, store.ErrAlreadyExists) {
		writeError(w, http.StatusConflict, "conflict", "name: event type "+in.Name+" already exists (PATCH it)")
		return
	}
	if err == nil {
		w.Header().Set("Location", "/v1/event-types/"+t.Name)
	}
	s.writeEventType(w, r, http.StatusCreated, t, err)
}

func (s *V1) updateEventType(w http.ResponseWriter, r *http.Request, c caller) {
	if !operatorOnly(w, c) {
		return
	}
	be, _ := s.backend()
	var in eventTypeIn
	if !decode(w, r, &in) {
		return
	}
	name := r.PathValue("id")
	if in.Name != "" && in.Name != name {
		writeError(w, http.StatusBadRequest, "invalid", "name: an event type cannot be renamed; create the new name and delete this one")
		return
	}
	t, err := be.Store.ModifyEventType(r.Context(), name, func(t *eventtype.Type) error {
		in.apply(t)
		return nil
	})
	s.writeEventType(w, r, http.StatusOK, t, err)
}

func (s *V1) deleteEventType(w http.ResponseWriter, r *http.Request, c caller) {
	if !operatorOnly(w, c) {
		return
	}
	be, _ := s.backend()
	err := be.Store.DeleteEventType(r.Context(), r.PathValue("id"))
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.writeEventType(w, r, 0, eventtype.Type{}, err)
}

// writeEventType answers t, or the error: 404, 400 naming the field, 500.
func (s *V1) writeEventType(w http.ResponseWriter, r *http.Request, status int, t eventtype.Type, err error) {
	var fe *eventtype.FieldError
	switch {
	case err == nil:
		writeJSON(w, status, t)
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no such event type: "+r.PathValue("id"))
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, "invalid", fe.Error())
	default:
		s.internal(w, r, err)
	}
}
