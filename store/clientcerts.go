package store

import (
	"fmt"

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
