package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// Support's account search counts live endpoints apart from deleted ones
// (issue 32: deleted endpoint ids were counted as the account's endpoints).
func TestPortalSearchCountsLiveEndpoints(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, id := range []string{"ep1", "ep2", "ep3"} {
		addEndpoint(t, db, id)
	}
	require.NoError(t, db.Store.DeleteEndpoint(ctx, "ep3"))
	hits, err := db.Store.PortalSearch(ctx, "acct_")
	require.NoError(t, err)
	require.Len(t, hits, 1)
	require.Equal(t, "account", hits[0].Kind)
	require.Equal(t, "2 endpoint(s), 1 deleted", hits[0].Detail)

	hits, err = db.Store.PortalSearch(ctx, "ep3")
	require.NoError(t, err)
	require.Len(t, hits, 1)
	require.Equal(t, "deleted", hits[0].Detail, "a deleted endpoint is still found by id")
}
