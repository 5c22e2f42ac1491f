package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/endpoint"
)

// EndpointGroup is a set of endpoints with one behaviour, all subscribed to
// the events of their own accounts.
type EndpointGroup struct {
	// Class names the group in reports.
	Class string
	// Accounts is how many accounts the group has; each has PerAccount
	// endpoints. Defaults to 1 and 1.
	Accounts, PerAccount int
	Behave               Behavior
	FailAttempts         int
	FailEvery            int
	// Weight is how many times each account of the group is listed in the
	// load's account list (its share of the events). Defaults to 1.
	Weight int
	// Latency is added before every 200 (slow receivers). Defaults to 0.
	Latency time.Duration
}

// Topology is the endpoints registered for a scenario.
type Topology struct {
	Receiver *Receiver
	// Accounts is the load generator's account list (weights applied).
	Accounts      []string
	Subscriptions map[string][]string
	Class         map[string]string
	// DeliveriesPerEvent is the average fan-out of an event of Accounts.
	DeliveriesPerEvent float64
}

// RegisterEndpoints starts one receiver and registers every group's
// endpoints in webhooks.endpoints.
func RegisterEndpoints(ctx context.Context, pool *pgxpool.Pool, prefix string, groups []EndpointGroup) (*Topology, error) {
	rc, err := StartReceiver(ReceiverOptions{KeepRequests: true})
	if err != nil {
		return nil, err
	}
	top := &Topology{Receiver: rc, Subscriptions: map[string][]string{}, Class: map[string]string{}}
	fan := 0
	for _, g := range groups {
		accts, per, weight := max(g.Accounts, 1), max(g.PerAccount, 1), max(g.Weight, 1)
		for a := range accts {
			acct := fmt.Sprintf("%s_%s_%d", prefix, g.Class, a)
			for e := range per {
				id := fmt.Sprintf("ep_%s_%s_%d_%d", prefix, g.Class, a, e)
				secret := endpoint.NewSecret()
				url, err := rc.Add(EndpointSpec{ID: id, Secret: secret, Behave: g.Behave, FailAttempts: g.FailAttempts, FailEvery: g.FailEvery,
					Latency: g.Latency})
				if err != nil {
					return nil, err
				}
				_, err = pool.Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets) VALUES ($1, $2, $3, $4)`,
					id, acct, url, []string{secret})
				if err != nil {
					return nil, fmt.Errorf("registering %s: %w", id, err)
				}
				top.Subscriptions[acct] = append(top.Subscriptions[acct], id)
				top.Class[id] = g.Class
			}
			for range weight {
				top.Accounts = append(top.Accounts, acct)
				fan += per
			}
		}
	}
	top.DeliveriesPerEvent = float64(fan) / float64(len(top.Accounts))
	return top, nil
}

// WaitSettled checks every second until the report has settled (nothing
// lost, the attempt log caught up) or timeout; it returns the last report.
// Once settled it keeps checking for up to rowsGrace more while the
// requests sent and the attempt rows differ: the rows of requests answered
// other than 2xx may still be on their way to Postgres.
func WaitSettled(ctx context.Context, in CheckInput, timeout time.Duration) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var settledAt time.Time
	for {
		rep, err := Check(ctx, in)
		if err == nil && rep.Settled() {
			if settledAt.IsZero() {
				settledAt = time.Now()
			}
			if (rep.RequestsNotLogged == 0 && rep.RowsWithoutRequest == 0) || time.Since(settledAt) >= rowsGrace {
				return rep, nil
			}
		}
		if pause(ctx, time.Second) != nil {
			// The last word is a check of its own: the poll that ran into
			// the deadline may have failed for that alone.
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return Check(last, in)
		}
	}
}

// rowsGrace is how long WaitSettled waits, once settled, for the attempt
// rows to match the requests.
const rowsGrace = 15 * time.Second
