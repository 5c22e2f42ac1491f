package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hookd/hookd/cmd/internal/cmdline"
	"github.com/hookd/hookd/store"
)

// SecretsCmd manages the encryption at rest of endpoint signing secrets.
type SecretsCmd struct {
	Status    SecretsStatusCmd    `cmd:"" help:"Count the stored signing secrets by key id (plain text included); exit 2 when some need a key not given."`
	RotateKey SecretsRotateKeyCmd `cmd:"" name:"rotate-key" help:"Encrypt every signing secret with the current (first) key: plain-text ones and those under older keys. Online, in batches, idempotent."`
}

// secretsFlags are the flags of the secrets commands.
type secretsFlags struct {
	PostgresFlags
	cmdline.SecretsKeyFlags
}

// open connects to Postgres with the keys given; bad keys and an
// unreachable database are usage errors (exit 2).
func (f secretsFlags) open(ctx context.Context, logger *slog.Logger) (*store.Store, error) {
	cfg := f.storeConfig()
	var err error
	if cfg.Secrets, err = f.Keyring(); err != nil {
		return nil, usage(err)
	}
	if _, err := store.ParsePoolConfig(cfg); err != nil {
		return nil, usage(err)
	}
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := store.Open(openCtx, cfg, logger)
	if err != nil {
		return nil, usage(err)
	}
	return st, nil
}

// SecretsStatusCmd prints how the signing secrets are stored.
type SecretsStatusCmd struct {
	secretsFlags
}

// Run implements `hookd secrets status`.
func (c *SecretsStatusCmd) Run(ctx context.Context, logger *slog.Logger, stdout io.Writer) error {
	st, err := c.open(ctx, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	at, checkErr := st.CheckSecretKeys(ctx)
	if checkErr != nil && !errors.Is(checkErr, store.ErrSecretsKey) {
		return checkErr
	}
	fmt.Fprintf(stdout, "plain text: %d\n", at.Plain)
	for _, id := range slices.Sorted(maps.Keys(at.ByKey)) {
		fmt.Fprintf(stdout, "key %s: %d\n", id, at.ByKey[id])
	}
	if checkErr != nil {
		return usage(secretsKeyHint(checkErr))
	}
	return nil
}

// secretsKeyHint says how to give the missing key.
func secretsKeyHint(err error) error {
	return fmt.Errorf("%w: give every key still in use in HOOKD_SECRETS_KEY or --secrets-key-file (docs/operations.md, Secrets at rest)", err)
}

// SecretsRotateKeyCmd re-encrypts every signing secret with the current key.
type SecretsRotateKeyCmd struct {
	secretsFlags
	BatchSize int `name:"batch-size" default:"500" help:"Endpoints rewritten per transaction (each batch locks its rows briefly)."`
}

// Run implements `hookd secrets rotate-key`.
func (c *SecretsRotateKeyCmd) Run(ctx context.Context, logger *slog.Logger, stdout io.Writer) error {
	if c.BatchSize < 1 {
		return usage(fmt.Errorf("--batch-size: must be at least 1, got %d", c.BatchSize))
	}
	st, err := c.open(ctx, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	ring, _ := c.Keyring() // checked by open
	if ring == nil {
		return usage(errors.New("no secrets key given: set HOOKD_SECRETS_KEY or --secrets-key-file (the first key is the one secrets are encrypted with)"))
	}
	res, err := st.RotateSecretKeys(ctx, store.RotateSecretsParams{BatchSize: c.BatchSize, OnBatch: func(r store.RotateSecretsResult) {
		logger.InfoContext(ctx, "rotating signing secrets", "endpoints", r.Endpoints, "encrypted", r.Encrypted, "reencrypted", r.Reencrypted)
	}})
	fmt.Fprintf(stdout, "endpoints: %d; encrypted from plain text: %d; re-encrypted from older keys: %d; already under key %s: %d\n",
		res.Endpoints, res.Encrypted, res.Reencrypted, ring.CurrentID(), res.Current)
	if err != nil {
		var ke *store.SecretKeyError
		if errors.As(err, &ke) {
			return usage(secretsKeyHint(err))
		}
		return err
	}
	others := slices.DeleteFunc(ring.IDs(), func(id string) bool { return id == ring.CurrentID() })
	if len(others) > 0 {
		fmt.Fprintf(stdout, "key %s no longer needed once every hookd and hookctl has key %s first (hookd secrets status shows what is in use)\n",
			strings.Join(others, ", "), ring.CurrentID())
	}
	return nil
}
