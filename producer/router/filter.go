package router

import (
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/endpoint/filter"
	"github.com/hookd/hookd/producer/event"
)

// applyFilters keeps the endpoints of matches whose payload filter accepts
// env (those without one always do), in place, and returns them with the
// number left out. The event's data is decoded at most once, and only when
// a filter reads it: an account without filters pays nothing.
func applyFilters(env *event.Envelope, matches []*endpoint.Endpoint) ([]*endpoint.Endpoint, int) {
	var (
		ev      *filter.Event
		decoded bool
	)
	kept, left := matches[:0], 0
	for _, ep := range matches {
		if ep.HasFilter() {
			if ev == nil {
				ev = &filter.Event{Type: env.Type, ID: env.ID, Created: env.Created}
			}
			if !decoded && ep.FilterUsesData() {
				// The envelope's data was checked to be a JSON object: an
				// error here leaves Data nil, which no data test matches.
				ev.Data, _ = filter.DecodeData(env.Data)
				decoded = true
			}
			if !ep.Accepts(ev) {
				left++
				continue
			}
		}
		kept = append(kept, ep)
	}
	return kept, left
}
