package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/secretbox"
)

// Signing secrets at rest. webhooks.endpoints.secrets holds, per secret,
// either the plain "whsec_..." value (installations without a key, and
// rows written before one was given) or a value sealed by package
// secretbox ("v1:<key id>:<base64>"), bound to the endpoint's id so that a
// sealed value copied to another row does not open. Sealing and opening
// happen here only: the rest of hookd sees plain secrets.

// SecretKeyError is returned by reads of an endpoint whose signing secret
// does not open with the keys given (Config.Secrets). It wraps the
// secretbox error (secretbox.ErrUnknownKey, ErrDecrypt, ErrMalformed).
type SecretKeyError struct {
	Endpoint string
	Err      error
}

func (e *SecretKeyError) Error() string {
	return fmt.Sprintf("endpoint %s: signing secret %s", e.Endpoint, e.Err.Error())
}

func (e *SecretKeyError) Unwrap() error { return e.Err }

// secretAAD binds a sealed secret to its endpoint (ids never change).
func secretAAD(endpointID string) []byte {
	return []byte("webhooks.endpoints.secrets\x00" + endpointID)
}

// sealSecrets returns the stored form of an endpoint's secrets: sealed
// under the current key, or as given when no key is configured.
func (s *Store) sealSecrets(endpointID string, plain []string) []string {
	if s.secrets == nil {
		return plain
	}
	out := make([]string, len(plain))
	for i, p := range plain {
		out[i] = s.secrets.Seal(p, secretAAD(endpointID))
	}
	return out
}

// openSecrets returns the plain secrets of stored ones.
func (s *Store) openSecrets(endpointID string, stored []string) ([]string, error) {
	out := make([]string, len(stored))
	for i, v := range stored {
		if !secretbox.IsSealed(v) {
			out[i] = v
			continue
		}
		if s.secrets == nil {
			id, _ := secretbox.SealedKeyID(v)
			return nil, &SecretKeyError{Endpoint: endpointID,
				Err: fmt.Errorf("%d: key id %s: %w (no secrets key configured)", i+1, id, secretbox.ErrUnknownKey)}
		}
		p, err := s.secrets.Open(v, secretAAD(endpointID))
		if err != nil {
			return nil, &SecretKeyError{Endpoint: endpointID, Err: fmt.Errorf("%d: %w", i+1, err)}
		}
		out[i] = p
	}
	return out, nil
}

// SecretsAtRest counts the stored signing secrets (and client certificate
// keys) by how they are kept.
type SecretsAtRest struct {
	// Plain counts the secrets stored in plain text.
	Plain int
	// ByKey counts the sealed secrets per key id.
	ByKey map[string]int
}

// ErrSecretsKey is wrapped by CheckSecretKeys when sealed secrets exist
// under a key id the configured keys lack (or none is configured).
var ErrSecretsKey = errors.New("signing secrets are encrypted with a key that is not given")

// CheckSecretKeys counts the stored secrets and fails, wrapping
// ErrSecretsKey with the missing key ids, when some are sealed under a key
// the store was not given: hookd refuses to start then, rather than fail
// on every endpoint it reads. It reads the whole endpoints table once.
func (s *Store) CheckSecretKeys(ctx context.Context) (SecretsAtRest, error) {
	res := SecretsAtRest{ByKey: map[string]int{}}
	rows, err := s.pool.Query(ctx, `SELECT CASE WHEN v LIKE 'v1:%' THEN split_part(v, ':', 2) ELSE '' END, count(*)
		FROM webhooks.endpoints, unnest(array_remove(secrets || client_key, NULL)) AS v GROUP BY 1`)
	if err != nil {
		return res, fmt.Errorf("counting signing secrets: %s", oneLine(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return res, fmt.Errorf("counting signing secrets: %s", oneLine(err))
		}
		if id == "" {
			res.Plain += n
		} else {
			res.ByKey[id] += n
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("counting signing secrets: %s", oneLine(err))
	}
	var missing []string
	for _, id := range slices.Sorted(maps.Keys(res.ByKey)) {
		if s.secrets == nil || !s.secrets.Has(id) {
			missing = append(missing, fmt.Sprintf("%s (%d)", id, res.ByKey[id]))
		}
	}
	if len(missing) == 0 {
		return res, s.checkKeysOpen(ctx)
	}
	given := "none is given"
	if s.secrets != nil {
		given = "the keys given have id " + strings.Join(s.secrets.IDs(), ", ")
	}
	return res, fmt.Errorf("%w: key id %s; %s", ErrSecretsKey, strings.Join(missing, ", "), given)
}

// checkKeysOpen opens one sealed secret per key id in use: a key given
// under an explicit id that is not the key that sealed (a typo in a key
// file) fails here, at start-up, rather than on every read.
func (s *Store) checkKeysOpen(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (split_part(v, ':', 2)) id, v, client_key FROM (
			SELECT id, v, false AS client_key FROM webhooks.endpoints, unnest(secrets) AS v WHERE v LIKE 'v1:%'
			UNION ALL
			SELECT id, client_key, true FROM webhooks.endpoints WHERE client_key LIKE 'v1:%') sealed
		ORDER BY split_part(v, ':', 2), id, client_key`)
	if err != nil {
		return fmt.Errorf("checking the secrets keys: %s", oneLine(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id, v string
		var clientKey bool
		if err := rows.Scan(&id, &v, &clientKey); err != nil {
			return fmt.Errorf("checking the secrets keys: %s", oneLine(err))
		}
		open := func() error { _, err := s.openSecrets(id, []string{v}); return err }
		if clientKey {
			open = func() error { _, err := s.openClientKey(id, v); return err }
		}
		if err := open(); err != nil {
			return fmt.Errorf("%w: %w", ErrSecretsKey, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checking the secrets keys: %s", oneLine(err))
	}
	return nil
}

// RotateSecretsParams configures RotateSecretKeys.
type RotateSecretsParams struct {
	// BatchSize is the number of endpoints read, locked and rewritten per
	// transaction. Defaults to 500.
	BatchSize int
	// OnBatch, when set, is called after each committed batch with the
	// totals so far (progress output).
	OnBatch func(RotateSecretsResult)
}

// RotateSecretsResult counts the endpoints RotateSecretKeys went through.
type RotateSecretsResult struct {
	// Endpoints is every endpoint read.
	Endpoints int
	// Encrypted held at least one plain-text secret, now sealed.
	Encrypted int
	// Reencrypted were sealed under older keys only, now under the current one.
	Reencrypted int
	// Current were already sealed under the current key: left untouched.
	Current int
}

// RotateSecretKeys seals every endpoint's signing secrets (and client
// certificate key) under the current key: plain-text ones and those sealed
// under an older key. It runs online,
// in batches of endpoints locked FOR UPDATE for one short transaction each
// (an API edit of one of them waits for it), leaves updated_at alone (the
// secrets are the same), and is idempotent: a second run rewrites nothing.
// It stops at the first endpoint whose secrets do not open (a
// SecretKeyError): give every key still in use.
func (s *Store) RotateSecretKeys(ctx context.Context, p RotateSecretsParams) (RotateSecretsResult, error) {
	var res RotateSecretsResult
	if s.secrets == nil {
		return res, errors.New("rotating signing secrets: no secrets key configured to encrypt with")
	}
	if p.BatchSize <= 0 {
		p.BatchSize = 500
	}
	after := ""
	for {
		batch, last, err := s.rotateBatch(ctx, after, p.BatchSize)
		if err != nil {
			return res, err
		}
		res.Endpoints += batch.Endpoints
		res.Encrypted += batch.Encrypted
		res.Reencrypted += batch.Reencrypted
		res.Current += batch.Current
		if batch.Endpoints == 0 {
			return res, nil
		}
		if p.OnBatch != nil {
			p.OnBatch(res)
		}
		after = last
	}
}

// rotateBatch rewrites the endpoints after id `after` (at most limit of
// them, in id order) whose secrets are not all sealed under the current key.
func (s *Store) rotateBatch(ctx context.Context, after string, limit int) (res RotateSecretsResult, last string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = RotateSecretsResult{}
		rows, err := tx.Query(ctx, `SELECT id, secrets, client_key FROM webhooks.endpoints WHERE id > $1 ORDER BY id LIMIT $2 FOR UPDATE`, after, limit)
		if err != nil {
			return fmt.Errorf("rotating signing secrets: %s", oneLine(err))
		}
		type row struct {
			id        string
			secrets   []string
			clientKey *string
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.secrets, &x.clientKey)
		})
		if err != nil {
			return fmt.Errorf("rotating signing secrets: %s", oneLine(err))
		}
		updates := &pgx.Batch{}
		for _, r := range got {
			res.Endpoints++
			last = r.id
			values := r.secrets
			if r.clientKey != nil {
				values = append(slices.Clip(values), *r.clientKey)
			}
			switch s.secretsState(values) {
			case stateCurrent:
				res.Current++
				continue
			case statePlain:
				res.Encrypted++
			default:
				res.Reencrypted++
			}
			plain, err := s.openSecrets(r.id, r.secrets)
			if err != nil {
				return err
			}
			var clientKey *string
			if r.clientKey != nil {
				key, err := s.openClientKey(r.id, *r.clientKey)
				if err != nil {
					return err
				}
				sealed := s.secrets.Seal(key, clientKeyAAD(r.id))
				clientKey = &sealed
			}
			updates.Queue(`UPDATE webhooks.endpoints SET secrets = $2, client_key = $3 WHERE id = $1`, r.id,
				s.sealSecrets(r.id, plain), clientKey)
		}
		if updates.Len() == 0 {
			return nil
		}
		if err := tx.SendBatch(ctx, updates).Close(); err != nil {
			return fmt.Errorf("rotating signing secrets: %s", oneLine(err))
		}
		return nil
	})
	return res, last, err
}

type secretsState int

const (
	stateCurrent secretsState = iota // all sealed under the current key
	statePlain                       // at least one in plain text
	stateOlder                       // sealed, some under an older key
)

func (s *Store) secretsState(stored []string) secretsState {
	st := stateCurrent
	for _, v := range stored {
		id, ok := secretbox.SealedKeyID(v)
		switch {
		case !secretbox.IsSealed(v):
			return statePlain
		case !ok || id != s.secrets.CurrentID():
			st = stateOlder
		}
	}
	return st
}
