package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/signature"
)

// The prepared state of an endpoint is reused while its URL and secrets
// stay, prepared again when either changes (an endpoint update applies
// at the next request), and forgotten after two rotations unused.
func TestPreparedCache(t *testing.T) {
	t.Parallel()
	const secretA, secretB = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	var c preparedCache
	tg := Target{ID: "ep_1", URL: "http://127.0.0.1:1/a", Secrets: []string{secretA}}
	p := c.get(tg)
	require.NoError(t, p.err)
	require.Equal(t, "/a", p.url.Path)
	require.Same(t, p, c.get(tg), "reused")

	tg.URL = "http://127.0.0.1:1/b"
	p2 := c.get(tg)
	require.NotSame(t, p, p2)
	require.Equal(t, "/b", p2.url.Path, "a new URL applies")

	tg.Secrets = []string{secretB, secretA}
	p3 := c.get(tg)
	require.NotSame(t, p2, p3, "new secrets apply")
	require.NotEqual(t, p2.signer.Sign("evt", "1", nil), p3.signer.Sign("evt", "1", nil))

	bad := c.get(Target{ID: "ep_2", URL: "ftp://x/", Secrets: []string{secretA}})
	require.True(t, errors.Is(bad.err, ErrInvalidURL))
	bad = c.get(Target{ID: "ep_3", URL: "http://x/", Secrets: []string{"whsec_!!"}})
	require.True(t, errors.Is(bad.err, ErrInvalidSecret))
	bad = c.get(Target{ID: "ep_4", URL: "http://x/"})
	require.True(t, errors.Is(bad.err, ErrInvalidSecret), "no secret")

	// Two rotations without a request to ep_2..4 forget them; ep_1, used
	// in between, stays.
	c.rotated = c.rotated.Add(-preparedRotate)
	c.gets = preparedCheckEvery - 1 // the next lookup reads the clock
	require.Same(t, p3, c.get(tg))
	c.rotated = c.rotated.Add(-preparedRotate - time.Second)
	c.gets = preparedCheckEvery - 1
	require.Same(t, p3, c.get(tg))
	require.Len(t, c.cur, 1)
	require.Len(t, c.old, 1)
}

// The timestamp cache answers what signature.Timestamp does, for the
// second asked for, forwards and backwards, and makes one string a second.
func TestTimestampCache(t *testing.T) {
	var c timestampCache
	base := time.Unix(1714564800, 0)
	for _, off := range []time.Duration{0, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond, -time.Second, 3 * time.Hour} {
		now := base.Add(off)
		require.Equal(t, signature.Timestamp(now), c.get(now), "at %v", off)
	}
	now := base.Add(time.Hour)
	c.get(now)
	require.Zero(t, testing.AllocsPerRun(100, func() { c.get(now.Add(500 * time.Millisecond)) }))
}
