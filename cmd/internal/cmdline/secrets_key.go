package cmdline

import (
	"errors"
	"fmt"
	"os"

	"github.com/hookd/hookd/internal/secretbox"
)

// SecretsKeyFlags give the keys that encrypt endpoint signing secrets at
// rest (package secretbox). hookd and hookctl embed them, so both read the
// same HOOKD_* variables: every process that reads or writes endpoints
// needs the same keys.
type SecretsKeyFlags struct {
	SecretsKey     string `name:"secrets-key" env:"HOOKD_SECRETS_KEY" help:"Keys that encrypt endpoint signing secrets at rest: base64 of 32 random bytes (head -c32 /dev/urandom | base64), optionally id:<base64>; several comma-separated, the first encrypts new secrets, all decrypt. Empty: secrets are stored in plain text. Prefer the environment variable (a flag shows in the process list) or --secrets-key-file."`
	SecretsKeyFile string `name:"secrets-key-file" env:"HOOKD_SECRETS_KEY_FILE" type:"path" help:"File holding the --secrets-key list instead, one key per line (lines starting with # are skipped)."`
}

// Keyring parses the keys given; nil when none is (secrets stay in plain
// text). Errors never show a key.
func (f SecretsKeyFlags) Keyring() (*secretbox.Keyring, error) {
	switch {
	case f.SecretsKey != "" && f.SecretsKeyFile != "":
		return nil, errors.New("give --secrets-key (HOOKD_SECRETS_KEY) or --secrets-key-file (HOOKD_SECRETS_KEY_FILE), not both")
	case f.SecretsKey != "":
		r, err := secretbox.ParseKeys(f.SecretsKey)
		if err != nil {
			return nil, fmt.Errorf("--secrets-key: %w", err)
		}
		return r, nil
	case f.SecretsKeyFile != "":
		b, err := os.ReadFile(f.SecretsKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--secrets-key-file: %w", err)
		}
		r, err := secretbox.ParseKeys(string(b))
		if err != nil {
			return nil, fmt.Errorf("--secrets-key-file %s: %w", f.SecretsKeyFile, err)
		}
		return r, nil
	}
	return nil, nil
}
