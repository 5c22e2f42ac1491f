package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/endpoint/filter"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.For(t, 10*time.Second, what, cond)
}

func ids(eps []*endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.ID
	}
	return out
}

func mustCreate(t *testing.T, st *store.Store, id, account string, types ...string) {
	t.Helper()
	_, err := st.CreateEndpoint(context.Background(), endpoint.Endpoint{ID: id, Account: account, URL: "http://127.0.0.1:1/" + id,
		Secrets: []string{endpoint.NewSecret()}, EventTypes: types})
	require.NoError(t, err)
}

func TestIndexFollowsChanges(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	mustCreate(t, st, "ep_all", "acct_1")
	mustCreate(t, st, "ep_inv", "acct_1", "invoice.*")
	mustCreate(t, st, "ep_cust", "acct_1", "customer.created")
	mustCreate(t, st, "ep_other", "acct_2")

	idx, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: st,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- idx.Run(ctx) }()
	require.NoError(t, idx.WaitReady(ctx))

	require.Equal(t, []string{"ep_all", "ep_inv"}, ids(idx.Match("acct_1", "invoice.paid", nil)))
	require.Equal(t, []string{"ep_all", "ep_cust"}, ids(idx.Match("acct_1", "customer.created", nil)))
	require.Equal(t, []string{"ep_other"}, ids(idx.Match("acct_2", "invoice.paid", nil)))
	require.Empty(t, idx.Match("acct_3", "invoice.paid", nil))

	// Disable: still matched (its deliveries are dead-lettered as
	// endpoint_disabled, to be resent later) and known by id as disabled.
	_, err = st.ModifyEndpoint(ctx, "ep_inv", func(e *endpoint.Endpoint) error {
		e.Status = endpoint.StatusDisabled
		return nil
	})
	require.NoError(t, err)
	eventually(t, "disable to reach the index", func() bool {
		got, ok := idx.Endpoint("ep_inv")
		return ok && got.Status == endpoint.StatusDisabled
	})
	require.Equal(t, []string{"ep_all", "ep_inv"}, ids(idx.Match("acct_1", "invoice.paid", nil)))
	got, ok := idx.Endpoint("ep_inv")
	require.True(t, ok)
	require.Equal(t, endpoint.StatusDisabled, got.Status)

	// New endpoint and a delete.
	mustCreate(t, st, "ep_new", "acct_1", "invoice.paid")
	require.NoError(t, st.DeleteEndpoint(ctx, "ep_all"))
	eventually(t, "insert and delete to reach the index", func() bool {
		return slices.Equal([]string{"ep_inv", "ep_new"}, ids(idx.Match("acct_1", "invoice.paid", nil)))
	})
	_, ok = idx.Endpoint("ep_all")
	require.False(t, ok)

	// Kill the listening connection; a change made meanwhile arrives through
	// the full reload on reconnect.
	var killed int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&killed))
	require.Equal(t, 1, killed, "the index's listening connection")
	mustCreate(t, st, "ep_after", "acct_2")
	eventually(t, "change during reconnect to reach the index", func() bool {
		return slices.Equal([]string{"ep_after", "ep_other"}, ids(idx.Match("acct_2", "x", nil)))
	})

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// The index compiles each endpoint's payload filter when it loads it; a
// stored filter that does not parse leaves the endpoint unfiltered.
func TestIndexCompilesFilters(t *testing.T) {
	t.Parallel()
	eps := []endpoint.Endpoint{
		{ID: "ep_a", Account: "acct", Filter: []byte(`{"data": {"amount": {"$gt": 100}}}`)},
		{ID: "ep_b", Account: "acct", Filter: []byte(`{"data": {"amount": {"$regex": "x"}}}`)},
		{ID: "ep_c", Account: "acct"},
	}
	x := loadedIndex(t, eps)
	small := &filter.Event{Type: "t", Data: map[string]any{"amount": 5.0}}
	got := x.Match("acct", "t", nil)
	require.Len(t, got, 3)
	require.True(t, got[0].HasFilter())
	require.False(t, got[0].Accepts(small))
	require.False(t, got[1].HasFilter(), "an unreadable filter is left out")
	require.True(t, got[1].Accepts(small))
	require.True(t, got[2].Accepts(small))
}

// staticSource serves a fixed list of endpoints and no changes.
type staticSource []endpoint.Endpoint

func (s staticSource) AllEndpoints(context.Context) ([]endpoint.Endpoint, error) {
	return slices.Clone(s), nil
}

func (s staticSource) EndpointsByID(context.Context, []string) ([]endpoint.Endpoint, error) {
	return nil, nil
}

func (s staticSource) ListenEndpointChanges(ctx context.Context, onListening func(context.Context) error, _ func(string)) error {
	if err := onListening(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func loadedIndex(t *testing.T, eps []endpoint.Endpoint) *endpoint.Index {
	t.Helper()
	x, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: staticSource(eps),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.NoError(t, x.WaitReady(ctx))
	return x
}
