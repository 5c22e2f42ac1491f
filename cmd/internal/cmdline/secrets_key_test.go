package cmdline

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookd/hookd/internal/secretbox"
)

func TestSecretsKeyFlags(t *testing.T) {
	t.Parallel()
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("# current first\nnew:"+k2+"\n"+k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if r, err := (SecretsKeyFlags{}).Keyring(); r != nil || err != nil {
		t.Fatalf("no flags: %v, %v; want no keyring (plain text)", r, err)
	}
	r, err := SecretsKeyFlags{SecretsKey: k1 + "," + k2}.Keyring()
	if err != nil || r.CurrentID() != secretbox.KeyID(bytes.Repeat([]byte{1}, 32)) || len(r.IDs()) != 2 {
		t.Fatalf("--secrets-key: %v, %v", r, err)
	}
	r, err = SecretsKeyFlags{SecretsKeyFile: file}.Keyring()
	if err != nil || r.CurrentID() != "new" || len(r.IDs()) != 2 {
		t.Fatalf("--secrets-key-file: %v, %v", r, err)
	}
	for _, bad := range []SecretsKeyFlags{
		{SecretsKey: k1, SecretsKeyFile: file},
		{SecretsKey: k1[:10]},
		{SecretsKeyFile: filepath.Join(t.TempDir(), "missing")},
	} {
		_, err := bad.Keyring()
		if err == nil {
			t.Errorf("%+v accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), k1[:10]) {
			t.Errorf("error %q shows the key", err)
		}
	}
}
