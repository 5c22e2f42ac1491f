package signature_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookd/hookd/dispatcher/signature"
)

// verifyV1a is a receiver's check written from the Standard Webhooks
// specification, sharing nothing with the signer: the public key is
// "whpk_" + base64 of 32 bytes; the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>"; webhook-signature is a
// space-separated list of "<version>,<base64>" and one "v1a" entry must
// be a valid ed25519 signature of that content.
func verifyV1a(t *testing.T, publicKey, msgID, ts string, body []byte, header string) bool {
	t.Helper()
	raw, ok := strings.CutPrefix(publicKey, "whpk_")
	if !ok {
		t.Fatalf("public key %q lacks whpk_", publicKey)
	}
	pub, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("public key %q: not base64 of 32 bytes", publicKey)
	}
	content := []byte(msgID + "." + ts + "." + string(body))
	for _, entry := range strings.Fields(header) {
		version, b64, _ := strings.Cut(entry, ",")
		if version != "v1a" {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && ed25519.Verify(pub, content, sig) {
			return true
		}
	}
	return false
}

// verifyV1 is the symmetric check, from the specification too.
func verifyV1(secret, msgID, ts string, body []byte, header string) bool {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID + "." + ts + "."))
	m.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, entry := range strings.Fields(header) {
		if hmac.Equal([]byte(entry), []byte(want)) {
			return true
		}
	}
	return false
}

func TestAsymmetricSignatureVerifiesFromSpec(t *testing.T) {
	t.Parallel()
	private := signature.NewPrivateKey()
	k, err := signature.ParseKey(private)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Asymmetric() || !strings.HasPrefix(k.PublicKey(), "whpk_") {
		t.Fatalf("key: asymmetric %v, public key %q", k.Asymmetric(), k.PublicKey())
	}
	body := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"amount":100}}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	header := signature.NewKeySigner([]signature.Key{k}).Sign("msg_1", ts, body)
	if !strings.HasPrefix(header, "v1a,") || strings.Contains(header, " ") {
		t.Fatalf("header %q: want one v1a signature", header)
	}
	if !verifyV1a(t, k.PublicKey(), "msg_1", ts, body, header) {
		t.Fatalf("the spec's verifier refused %q", header)
	}
	if verifyV1a(t, k.PublicKey(), "msg_1", ts, append(body, ' '), header) {
		t.Fatal("a changed body verified")
	}
	other, _ := signature.ParseKey(signature.NewPrivateKey())
	if verifyV1a(t, other.PublicKey(), "msg_1", ts, body, header) {
		t.Fatal("another key pair's public key verified")
	}
}

// A rotation between kinds: the new ed25519 key and the old secret both
// sign, in that order, and each verifies on its own.
func TestMixedKeysSignBoth(t *testing.T) {
	t.Parallel()
	private, secret := signature.NewPrivateKey(), "whsec_"+base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	keys, err := signature.ParseKeys([]string{private, secret})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"a":1}`)
	header := signature.NewKeySigner(keys).Sign("msg_2", "1700000000", body)
	parts := strings.Fields(header)
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "v1a,") || !strings.HasPrefix(parts[1], "v1,") {
		t.Fatalf("header %q: want v1a then v1", header)
	}
	if !verifyV1a(t, keys[0].PublicKey(), "msg_2", "1700000000", body, header) || !verifyV1(secret, "msg_2", "1700000000", body, header) {
		t.Fatalf("header %q does not verify with both keys", header)
	}
	if keys[1].Asymmetric() || keys[1].PublicKey() != "" {
		t.Fatal("a whsec_ secret reads as asymmetric")
	}
	// The v1 part is what the HMAC-only Signer writes.
	sec, _ := signature.ParseSecret(secret)
	if want := signature.NewSigner([]signature.Secret{sec}).Sign("msg_2", "1700000000", body); parts[1] != want {
		t.Fatalf("v1 part %q, want %q", parts[1], want)
	}
}

// The known answer of the Standard Webhooks libraries' own test: seed,
// message and signature.
func TestAsymmetricKnownAnswer(t *testing.T) {
	t.Parallel()
	k, err := signature.ParseKey("whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=")
	if err != nil {
		t.Fatal(err)
	}
	got := signature.NewKeySigner([]signature.Key{k}).Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	const want = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestParseKeyErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"whsk_", "whsk_!!!", "whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 64))} {
		_, err := signature.ParseKey(s)
		if !errors.Is(err, signature.ErrBadPrivateKey) {
			t.Errorf("ParseKey(%.20q) = %v, want ErrBadPrivateKey", s, err)
		}
		if err != nil && strings.Contains(err.Error(), s[5:]) && len(s) > 5 {
			t.Errorf("the error %q contains the key", err)
		}
	}
	if _, err := signature.ParseKey("nope"); !errors.Is(err, signature.ErrBadSecret) {
		t.Errorf("ParseKey(nope) = %v, want ErrBadSecret", err)
	}
}
