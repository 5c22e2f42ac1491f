package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// APIToken is a bearer token of the HTTP API, scoped to one account. The
// token itself is never stored, only its SHA-256.
type APIToken struct {
	ID          string     `json:"id"`
	Account     string     `json:"account"`
	Description string     `json:"description,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
}

// tokenPrefix starts every account token, so that a leaked one is easy to
// recognise (secret scanners) and to tell from the admin token.
const tokenPrefix = "hkt_"

// HashToken is the SHA-256 of a bearer token, as stored.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateAPIToken creates a token for account and returns it with its
// secret value ("hkt_" and 256 random bits), which is not stored and cannot
// be shown again.
func (s *Store) CreateAPIToken(ctx context.Context, account, description string) (APIToken, string, error) {
	var idb [8]byte
	var secret [32]byte
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(secret[:])
	id := "tok_" + hex.EncodeToString(idb[:])
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret[:])
	var t APIToken
	err := s.pool.QueryRow(ctx, `INSERT INTO webhooks.api_tokens (id, account, token_sha256, description)
		VALUES ($1, $2, $3, $4) RETURNING id, account, description, created_at, revoked_at`,
		id, account, HashToken(token), description).Scan(&t.ID, &t.Account, &t.Description, &t.CreatedAt, &t.RevokedAt)
	if err != nil {
		return t, "", fmt.Errorf("creating token: %s", oneLine(err))
	}
	return t, token, nil
}

// AccountForToken returns the account of a valid (existing, not revoked)
// token, or ErrNotFound.
func (s *Store) AccountForToken(ctx context.Context, token string) (string, error) {
	if !strings.HasPrefix(token, tokenPrefix) {
		return "", ErrNotFound
	}
	var account string
	err := s.pool.QueryRow(ctx, `SELECT account FROM webhooks.api_tokens
		WHERE token_sha256 = $1 AND revoked_at IS NULL`, HashToken(token)).Scan(&account)
	if err != nil {
		if err = translate(err); errors.Is(err, ErrNotFound) {
			return "", ErrNotFound
		}
		return "", fmt.Errorf("checking token: %s", oneLine(err))
	}
	return account, nil
}

// ListAPITokens returns the tokens of account (every account when empty),
// revoked ones included, newest first.
func (s *Store) ListAPITokens(ctx context.Context, account string) ([]APIToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, account, description, created_at, revoked_at FROM webhooks.api_tokens
		WHERE ($1 = '' OR account = $1) ORDER BY created_at DESC, id`, account)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %s", oneLine(err))
	}
	defer rows.Close()
	out := []APIToken{}
	for rows.Next() {
		var t APIToken
		if err := rows.Scan(&t.ID, &t.Account, &t.Description, &t.CreatedAt, &t.RevokedAt); err != nil {
			return nil, fmt.Errorf("listing tokens: %s", oneLine(err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing tokens: %s", oneLine(err))
	}
	return out, nil
}

// RevokeAPIToken revokes the token with id; ErrNotFound when there is no
// such token or it was revoked already.
func (s *Store) RevokeAPIToken(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE webhooks.api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("revoking token %s: %s", id, oneLine(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	return nil
}
