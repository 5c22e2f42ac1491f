package store

import (
	"context"
	"fmt"
	"time"
)

// PendingDelivery is the first row of one delivery, written by the router
// at fan-out.
type PendingDelivery struct {
	ID           string
	EventID      string
	EndpointID   string
	Account      string
	EventType    string
	EventCreated time.Time
}

// InsertPendingDeliveries writes one 'pending' row per delivery in a single
// statement (one round trip for the whole batch). A row that exists already
// is left alone: the attempt-log writer may have written a later status
// first, and a re-read of the same events must not reset it.
func (s *Store) InsertPendingDeliveries(ctx context.Context, ds []PendingDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	ids := make([]string, len(ds))
	events := make([]string, len(ds))
	endpoints := make([]string, len(ds))
	accounts := make([]string, len(ds))
	types := make([]string, len(ds))
	created := make([]time.Time, len(ds))
	for i, d := range ds {
		ids[i], events[i], endpoints[i], accounts[i], types[i], created[i] =
			d.ID, d.EventID, d.EndpointID, d.Account, d.EventType, d.EventCreated
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.deliveries
		(id, event_id, endpoint_id, account, event_type, event_created_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
		ON CONFLICT (id) DO NOTHING`, ids, events, endpoints, accounts, types, created)
	if err != nil {
		return wrapWriteError(fmt.Sprintf("inserting %d pending deliveries", len(ds)), err)
	}
	return nil
}
