package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/secretbox"
)

// Client certificates for mutual TLS: the certificate is public, its
// private key is sealed like the signing secrets (secrets.go) under a
// context of its own, so a sealed secret copied into client_key (or the
// other way round) does not open.

func clientKeyAAD(endpointID string) []byte {
	return []byte("webhooks.endpoints.client_key\x00" + endpointID)
}

// clientCertArgs are the client_cert, client_key and
// client_cert_not_after arguments of e: NULLs when it has none.
func (s *Store) clientCertArgs(e *endpoint.Endpoint) []any {
	info, ok := e.ClientCertInfo()
	if !ok {
		return []any{nil, nil, nil}
	}
	key := e.ClientKey
	if s.secrets != nil {
		key = s.secrets.Seal(key, clientKeyAAD(e.ID))
	}
	return []any{e.ClientCert, key, info.NotAfter}
}

// openClientKey returns the plain PEM key of a stored one.
func (s *Store) openClientKey(endpointID, stored string) (string, error) {
	if !secretbox.IsSealed(stored) {
		return stored, nil
	}
	if s.secrets == nil {
		id, _ := secretbox.SealedKeyID(stored)
		return "", &SecretKeyError{Endpoint: endpointID,
			Err: fmt.Errorf("client key: key id %s: %w (no secrets key configured)", id, secretbox.ErrUnknownKey)}
	}
	p, err := s.secrets.Open(stored, clientKeyAAD(endpointID))
	if err != nil {
		return "", &SecretKeyError{Endpoint: endpointID, Err: fmt.Errorf("client key: %w", err)}
	}
	return p, nil
}

// ExpiringCert is an endpoint whose client certificate expires soon, as
// the owner alert hookd.endpoint.certificate_expiring describes it.
type ExpiringCert struct {
	ID, Account, Description string
	// NotAfter is when the certificate expires; it keys the alert.
	NotAfter time.Time
}

// CertsToWarn lists, at most limit, the active endpoints whose client
// certificate expires at or before cutoff and whose owner was not warned
// about that certificate yet.
func (s *Store) CertsToWarn(ctx context.Context, cutoff time.Time, limit int) ([]ExpiringCert, error) {
	rows, err := s.pool.Query(ctx, `SELECT e.id, e.account, e.description, e.client_cert_not_after
		FROM webhooks.endpoints e LEFT JOIN webhooks.endpoint_health h ON h.endpoint_id = e.id
		WHERE e.status = 'active' AND e.client_cert_not_after <= $1
			AND h.warned_cert_not_after IS DISTINCT FROM e.client_cert_not_after
		ORDER BY e.client_cert_not_after, e.id LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, wrapWriteError("listing expiring client certificates", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ExpiringCert, error) {
		var c ExpiringCert
		return c, row.Scan(&c.ID, &c.Account, &c.Description, &c.NotAfter)
	})
	if err != nil {
		return nil, wrapWriteError("listing expiring client certificates", err)
	}
	return out, nil
}

// MarkCertWarned records that the owner was warned about the certificate
// expiring at notAfter.
func (s *Store) MarkCertWarned(ctx context.Context, endpointID string, notAfter time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.endpoint_health AS h (endpoint_id, warned_cert_not_after) VALUES ($1, $2)
		ON CONFLICT (endpoint_id) DO UPDATE SET warned_cert_not_after = $2`, endpointID, notAfter)
	if err != nil {
		return wrapWriteError("marking client certificate warned", err)
	}
	return nil
}
