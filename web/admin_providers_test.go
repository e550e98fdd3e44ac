package web

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/provider"
)

// TestAdminShowsWhatEachProviderHasInForce: the admin page's providers
// table says, for each provider, the rate limit in force and whose budget
// it is, how many messages go in one call, and the window in which a
// repeat is deduplicated or a message can be asked about — the part of
// the exactly-once guarantee that depends on the provider.
func TestAdminShowsWhatEachProviderHasInForce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ps []provider.Provider
	for _, item := range []string{
		"outbox=maildir://" + filepath.Join(t.TempDir(), "outbox") + "?rate=5/s",
		"mail=resend://re_test@api.resend.com?batch=50",
		"pm=postmark://token@api.postmarkapp.com",
		"relay=smtp://relay.example.com:2525?tls=none",
	} {
		p, err := provider.ParseFlag(item)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	reg, err := provider.NewRegistry(ps...)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	b.srv = NewServer(Config{Pool: b.pool, Approval: b.svc, Providers: reg})
	admin := b.user("admin2@example.com", auth.RoleAdmin)

	d := parse(t, admin.get("/admin"))
	rows := map[string][3]string{}
	tid(d, "provider-row").Each(func(_ int, r *goquery.Selection) {
		name := strings.TrimSpace(r.Find("td").First().Text())
		rows[name] = [3]string{squash(r.Find(`[data-testid="provider-rate"]`).Text()),
			squash(r.Find(`[data-testid="provider-batch"]`).Text()), squash(r.Find(`[data-testid="provider-window"]`).Text())}
	})
	require.Equal(t, map[string][3]string{
		"outbox": {"5 calls a second per process", "1 message", "dedupes a repeat for ever; can be asked for ever, from the first call"},
		"mail":   {"2 calls a second, shared by the account (every process)", "up to 50 messages", "dedupes a repeat for 24 h, from the first call"},
		"pm": {"10 calls a second, shared by the account (every process)", "1 message",
			`can be asked for 45 days; "not found" is final after 2 min, from the first call`},
		"relay": {"no limit", "1 message", "none: a message in flight at a crash is unknown for a person"},
	}, rows)
}
