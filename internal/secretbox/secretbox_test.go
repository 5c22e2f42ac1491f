package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/hookd/hookd/internal/secretbox"
)

func rawKey(b byte) []byte { return bytes.Repeat([]byte{b}, secretbox.KeySize) }

func ring(t *testing.T, keys ...[]byte) *secretbox.Keyring {
	t.Helper()
	r, err := secretbox.NewKeyring(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var aad = []byte("ep_1")

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	r := ring(t, rawKey(1))
	sealed := r.Seal(secret, aad)
	if !secretbox.IsSealed(sealed) || strings.Contains(sealed, secret) || strings.Contains(sealed, "MfKQ9r8G") {
		t.Fatalf("sealed value %q is not sealed or shows the secret", sealed)
	}
	if id, ok := secretbox.SealedKeyID(sealed); !ok || id != r.CurrentID() || id != secretbox.KeyID(rawKey(1)) {
		t.Fatalf("key id %q %v, want %q", id, ok, r.CurrentID())
	}
	if again := r.Seal(secret, aad); again == sealed {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	got, err := r.Open(sealed, aad)
	if err != nil || got != secret {
		t.Fatalf("Open = %q, %v; want the secret", got, err)
	}
	if secretbox.IsSealed(secret) {
		t.Fatal("a whsec_ secret counts as sealed")
	}
}

func TestOldKeysOpenNewKeySeals(t *testing.T) {
	t.Parallel()
	old := ring(t, rawKey(1))
	sealedOld := old.Seal(secret, aad)
	both := ring(t, rawKey(2), rawKey(1))
	if got, err := both.Open(sealedOld, aad); err != nil || got != secret {
		t.Fatalf("the new ring does not open what the old key sealed: %q, %v", got, err)
	}
	sealedNew := both.Seal(secret, aad)
	if id, _ := secretbox.SealedKeyID(sealedNew); id != secretbox.KeyID(rawKey(2)) {
		t.Fatalf("sealed under %s, want the first key %s", id, secretbox.KeyID(rawKey(2)))
	}
	if _, err := old.Open(sealedNew, aad); !errors.Is(err, secretbox.ErrUnknownKey) {
		t.Fatalf("old ring on a new value: %v, want ErrUnknownKey", err)
	}
}

func TestWrongKeyUnderSameID(t *testing.T) {
	t.Parallel()
	b64 := func(k []byte) string { return base64.StdEncoding.EncodeToString(k) }
	a, err := secretbox.ParseKeys("k1:" + b64(rawKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := secretbox.ParseKeys("k1:" + b64(rawKey(2)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Open(a.Seal(secret, aad), aad)
	if !errors.Is(err, secretbox.ErrDecrypt) {
		t.Fatalf("wrong key under the same id: %v, want ErrDecrypt", err)
	}
}

func TestTamperedAndRebound(t *testing.T) {
	t.Parallel()
	r := ring(t, rawKey(1))
	sealed := r.Seal(secret, aad)
	id, _ := secretbox.SealedKeyID(sealed)
	body, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sealed, secretbox.Prefix+id+":"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		flipped := bytes.Clone(body)
		flipped[i] ^= 0x01
		v := secretbox.Prefix + id + ":" + base64.StdEncoding.EncodeToString(flipped)
		if _, err := r.Open(v, aad); !errors.Is(err, secretbox.ErrDecrypt) {
			t.Fatalf("byte %d flipped: %v, want ErrDecrypt", i, err)
		}
	}
	if _, err := r.Open(sealed, []byte("ep_2")); !errors.Is(err, secretbox.ErrDecrypt) {
		t.Fatalf("opened with another endpoint's aad: %v, want ErrDecrypt", err)
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	r := ring(t, rawKey(1))
	for _, v := range []string{"v1:", "v1:abc", "v1:a b:xx", "v1:abcd:!!!", "v1:" + r.CurrentID() + ":AAAA", secret} {
		if _, err := r.Open(v, aad); !errors.Is(err, secretbox.ErrMalformed) {
			t.Errorf("Open(%q) = %v, want ErrMalformed", v, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k1 := base64.StdEncoding.EncodeToString(rawKey(1))
	k2 := base64.RawURLEncoding.EncodeToString(rawKey(2))
	r, err := secretbox.ParseKeys("# current first\n\n2026-12:" + k2 + "\n" + k1 + ", \n")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-12", secretbox.KeyID(rawKey(1))}
	if got := r.IDs(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ids %v, want %v", got, want)
	}
	if !r.Has("2026-12") || r.Has("nope") {
		t.Fatal("Has is wrong")
	}
	short := base64.StdEncoding.EncodeToString(rawKey(1)[:16])
	for _, bad := range []string{"", "# only a comment", short, "not base64!", "bad id:" + k1, k1 + "," + k1} {
		_, err := secretbox.ParseKeys(bad)
		if err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), k1) || strings.Contains(err.Error(), short) {
			t.Errorf("error %q shows the key", err)
		}
	}
}
