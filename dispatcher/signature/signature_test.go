package signature_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/signature"
)

const (
	oldSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
)

func TestSignVerifiesWithOfficialLibrary(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"invoice.paid","created":"2024-01-01T00:00:00Z","data":{"a":1}}`)
	keys, err := signature.ParseSecrets([]string{newSecret, oldSecret})
	require.NoError(t, err)
	now := time.Now()
	sig := signature.Sign("evt_1", now, body, keys)
	require.Len(t, strings.Split(sig, " "), 2, "one signature per active secret")

	h := http.Header{}
	h.Set("webhook-id", "evt_1")
	h.Set("webhook-timestamp", signature.Timestamp(now))
	h.Set("webhook-signature", sig)
	for _, s := range []string{newSecret, oldSecret} {
		wh, err := standardwebhooks.NewWebhook(s)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(body, h), "secret %s must verify", s[:10])
		// The official library's own signature is among ours.
		theirs, err := wh.Sign("evt_1", now, body)
		require.NoError(t, err)
		require.Contains(t, sig, theirs)
	}

	// A different secret, a tampered body or id must not verify.
	other, err := standardwebhooks.NewWebhook("whsec_" + "dGhpcyBpcyBhbm90aGVyIHNlY3JldCBrZXk=")
	require.NoError(t, err)
	require.Error(t, other.Verify(body, h))
	wh, _ := standardwebhooks.NewWebhook(newSecret)
	require.Error(t, wh.Verify(append([]byte(nil), append(body, ' ')...), h))
	h.Set("webhook-id", "evt_2")
	require.Error(t, wh.Verify(body, h))
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{newSecret, true},
		{strings.TrimPrefix(newSecret, "whsec_"), true},
		{"whsec_", false},
		{"whsec_!!!notbase64", false},
		{"whsec_YWJj", false}, // 3 bytes
	} {
		_, err := signature.ParseSecret(tc.in)
		if tc.ok {
			require.NoError(t, err, tc.in)
		} else {
			require.ErrorIs(t, err, signature.ErrBadSecret, tc.in)
		}
	}
}

// A Signer's signatures are Sign's, for any message, from many goroutines
// at once (its HMAC states are reused, never shared).
func TestSignerMatchesSign(t *testing.T) {
	t.Parallel()
	keys, err := signature.ParseSecrets([]string{newSecret, oldSecret})
	require.NoError(t, err)
	s := signature.NewSigner(keys)
	ts := time.Unix(1714564800, 0)
	wh, err := standardwebhooks.NewWebhook(oldSecret)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				id := fmt.Sprintf("evt_%d_%d", g, i)
				body := []byte(strings.Repeat("b", i*7))
				got := s.Sign(id, signature.Timestamp(ts), body)
				theirs, err := wh.Sign(id, ts, body)
				if err != nil {
					t.Error(err)
					return
				}
				if !strings.HasSuffix(got, " "+theirs) {
					t.Errorf("%s: %q does not end with the official signature %q", id, got, theirs)
					return
				}
				if want := signature.Sign(id, ts, body, keys); got != want {
					t.Errorf("%s: Signer %q, Sign %q", id, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, signature.NewSigner(nil).Sign("evt_1", "1", nil), "no secrets, no signature")

	// A key longer than SHA-256's block is hashed first, as HMAC does.
	long := "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 100)))
	lk, err := signature.ParseSecrets([]string{long})
	require.NoError(t, err)
	lwh, err := standardwebhooks.NewWebhook(long)
	require.NoError(t, err)
	theirs, err := lwh.Sign("evt_long", ts, []byte("body"))
	require.NoError(t, err)
	require.Equal(t, theirs, signature.NewSigner(lk).Sign("evt_long", signature.Timestamp(ts), []byte("body")))
}

func BenchmarkSigner(b *testing.B) {
	keys, _ := signature.ParseSecrets([]string{newSecret})
	body := []byte(strings.Repeat("b", 300))
	ts := signature.Timestamp(time.Now())
	b.Run("Sign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			signature.Sign("evt_1", time.Now(), body, keys)
		}
	})
	b.Run("Signer", func(b *testing.B) {
		s := signature.NewSigner(keys)
		b.ReportAllocs()
		for b.Loop() {
			s.Sign("evt_1", ts, body)
		}
	})
}
