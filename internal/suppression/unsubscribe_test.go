package suppression_test

import (
	"context"
	"encoding/base64"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/pgtest"
	"github.com/onceplan/onceplan/internal/suppression"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestParsePublicURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://onceplan.example.com":         "https://onceplan.example.com",
		"https://onceplan.example.com/":        "https://onceplan.example.com",
		"http://127.0.0.1:8080":                "http://127.0.0.1:8080",
		" https://example.com/mail/onceplan/ ": "https://example.com/mail/onceplan",
	} {
		got, err := suppression.ParsePublicURL(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "onceplan.example.com", "/u", "ftp://example.com", "mailto:a@example.com",
		"https://", "https://user:pw@example.com", "https://example.com/?a=b", "https://example.com/#x", "http//example.com"} {
		_, err := suppression.ParsePublicURL(in)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "--public-url", in)
		require.NotContains(t, err.Error(), ". ", "one sentence: %s", err)
	}
	require.Equal(t, "http://127.0.0.1:8080", suppression.PublicURLFromListen("127.0.0.1:8080"))
	require.Equal(t, "http://127.0.0.1:9000", suppression.PublicURLFromListen(":9000"))
	require.Equal(t, "http://[::1]:9000", suppression.PublicURLFromListen("[::1]:9000"))
}

// TestTokens: a token names its campaign and address and checks; one
// altered anywhere (version, campaign, address, MAC, length) or made with
// another installation's secret does not; garbage is malformed. Following
// a link suppresses the address once, however often it is followed.
func TestTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	user := pgtest.User(t, pool, pgtest.UserOpts{Email: "p@example.com", Roles: []string{"proposer"}})
	var campaignID string
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO campaign (name, provider, tool, required_approvals, created_by)
		VALUES ('c', 'outbox', 'email.send', 1, $1) RETURNING id`, user).Scan(&campaignID))

	links := suppression.NewLinks(pool, "https://onceplan.example.com")
	u, err := links.URL(ctx, campaignID, "ann@example.com")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(u, "https://onceplan.example.com/u/"), u)
	token := strings.TrimPrefix(u, "https://onceplan.example.com/u/")
	require.Less(t, len(token), 100, "compact")
	again, err := suppression.NewLinks(pool, "").Token(ctx, campaignID, "ann@example.com")
	require.NoError(t, err)
	require.Equal(t, token, again, "deterministic, from the one secret")

	sub, err := links.Check(ctx, token)
	require.NoError(t, err)
	require.Equal(t, suppression.Subscription{CampaignID: campaignID, Address: "ann@example.com"}, sub)

	raw, err := base64.RawURLEncoding.DecodeString(token)
	require.NoError(t, err)
	alter := func(f func(b []byte) []byte) string {
		b := f(append([]byte(nil), raw...))
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for name, bad := range map[string]string{
		"campaign": alter(func(b []byte) []byte { b[3] ^= 1; return b }),
		"address":  alter(func(b []byte) []byte { b[17] = 'b'; return b }), // bnn@example.com
		"mac":      alter(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }),
		"shorter":  alter(func(b []byte) []byte { return append(b[:17], b[18:]...) }),
	} {
		_, err := links.Check(ctx, bad)
		require.ErrorIs(t, err, suppression.ErrUnknownLink, name)
		_, err = links.Unsubscribe(ctx, bad)
		require.ErrorIs(t, err, suppression.ErrUnknownLink, name)
	}
	for name, bad := range map[string]string{
		"version": alter(func(b []byte) []byte { b[0] = 2; return b }),
		"garbage": "not a token!",
		"empty":   "",
		"short":   base64.RawURLEncoding.EncodeToString(raw[:20]),
		"long":    strings.Repeat("A", suppression.MaxTokenLength+1),
	} {
		_, err := links.Check(ctx, bad)
		require.ErrorIs(t, err, suppression.ErrMalformedLink, name)
	}
	n, err := suppression.Count(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n, "no refused token changed anything")

	// Another installation's link (its own secret) does not check here.
	other := pgtest.Pool(t)
	foreign, err := suppression.NewLinks(other, "").Token(ctx, campaignID, "ann@example.com")
	require.NoError(t, err)
	require.NotEqual(t, token, foreign)
	_, err = links.Check(ctx, foreign)
	require.ErrorIs(t, err, suppression.ErrUnknownLink)

	for range 2 {
		sub, err := links.Unsubscribe(ctx, token)
		require.NoError(t, err)
		require.Equal(t, "ann@example.com", sub.Address)
	}
	e, found, err := suppression.Lookup(ctx, pool, "Ann@Example.com")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, suppression.Unsubscribed, e.Reason)
	require.Equal(t, suppression.FromUnsubscribe, e.Source)
	require.Equal(t, campaignID, e.CampaignID)
	n, err = suppression.Count(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestSecretMadeOnce: processes that ask for the secret at once on a
// fresh database end with one secret, and it is write-once.
func TestSecretMadeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.AppPool(t)
	const campaignID = "00000000-0000-4000-8000-000000000001"
	var (
		wg     sync.WaitGroup
		tokens = make([]string, 8)
	)
	for i := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := suppression.NewLinks(pool, "").Token(ctx, campaignID, "ann@example.com")
			require.NoError(t, err)
			tokens[i] = tok
		}()
	}
	await.Group(t, &wg, time.Minute, "the concurrent token requests to end")
	for _, tok := range tokens {
		require.Equal(t, tokens[0], tok)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM unsubscribe_secret`).Scan(&n))
	require.Equal(t, 1, n)
	_, err := pool.Exec(ctx, `UPDATE unsubscribe_secret SET secret = '\x00'::bytea`)
	require.Error(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM unsubscribe_secret`)
	require.Error(t, err)
}
