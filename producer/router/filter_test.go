package router_test

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/wait"
)

// Payload filters decide per endpoint which of its subscribed events it
// gets; a refused event is counted, never dead-lettered.
func TestFanOutAppliesPayloadFilters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_all", "acct_1", endpoint.StatusActive)
	e.filteredEndpoint(t, "ep_big", "acct_1", endpoint.StatusActive, `{"data": {"amount": {"$gte": 100}}}`)
	e.filteredEndpoint(t, "ep_eur", "acct_1", endpoint.StatusActive,
		`{"type": {"$prefix": "invoice."}, "data": {"currency": {"$in": ["EUR"]}}}`)
	e.filteredEndpoint(t, "ep_solo", "acct_2", endpoint.StatusActive, `{"id": "evt_never"}`)
	e.startRouter(t)

	e.produce(t,
		`{"id":"evt_1","account":"acct_1","type":"invoice.paid","data":{"amount":150,"currency":"EUR"}}`,
		`{"id":"evt_2","account":"acct_1","type":"invoice.paid","data":{"amount":50,"currency":"USD"}}`,
		`{"id":"evt_3","account":"acct_1","type":"charge.paid","data":{"amount":500,"currency":"EUR"}}`,
		`{"id":"evt_4","account":"acct_2","type":"invoice.paid","data":{}}`, // its one endpoint refuses it
	)
	recs := consume(t, e.kafka, e.names.Deliveries, 5, 20*time.Second)
	got := map[string][]string{}
	for _, r := range recs {
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		got[d.EventID] = append(got[d.EventID], d.EndpointID)
	}
	for _, v := range got {
		sort.Strings(v)
	}
	require.Equal(t, map[string][]string{
		"evt_1": {"ep_all", "ep_big", "ep_eur"},
		"evt_2": {"ep_all"},
		"evt_3": {"ep_all", "ep_big"},
	}, got)
	wait.For(t, 10*time.Second, "the filter metrics", func() bool {
		return metrictest.Value(t, e.reg, "hookd_router_filtered_deliveries_total") == 4
	})
	require.Equal(t, 1.0, metrictest.Value(t, e.reg, "hookd_router_events_total", "filtered"), "evt_4")
	require.Equal(t, 3.0, metrictest.Value(t, e.reg, "hookd_router_events_total", "fanned_out"))
	require.Empty(t, consume(t, e.kafka, e.names.DLQ, 0, time.Second), "nothing dead-lettered")
}
