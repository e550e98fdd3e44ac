package auth_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
)

// A stranger guessing the owner's password from one address slows down
// the stranger only: the owner still signs in from another address.
func TestLoginStrangerCannotLockOutOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.user(t, userOpts{})
	stranger := auth.LoginMeta{IP: "203.0.113.66"}

	// Many more failures than ever locked the account, the delays waited
	// out in between.
	for range 3 * auth.FailuresBeforeDelay {
		b.passDelays(t, owner.Email)
		_, _, err := auth.Login(b.ctx, b.pool, owner.Email, "a guess", stranger)
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	_, _, err := auth.Login(b.ctx, b.pool, owner.Email, "another guess", stranger)
	var te *auth.ThrottledError
	require.ErrorAs(t, err, &te, "the stranger waits")
	require.Equal(t, auth.ThrottleAccount, te.Scope)
	_, _, err = auth.Login(b.ctx, b.pool, owner.Email, goodPassword, stranger)
	require.ErrorIs(t, err, auth.ErrThrottled, "from the stranger's address, even the right password waits")

	_, got, err := auth.Login(b.ctx, b.pool, owner.Email, goodPassword, auth.LoginMeta{IP: "198.51.100.23"})
	require.NoError(t, err, "the owner, from another address, signs in")
	require.Equal(t, owner.ID, got.ID)
	_, _, err = auth.Login(b.ctx, b.pool, owner.Email, "another guess", stranger)
	require.ErrorIs(t, err, auth.ErrThrottled, "the owner's success elsewhere does not free the stranger")
}

// Each failure after the free ones doubles the wait, up to MaxDelay; the
// wait runs from the last failure.
func TestLoginThrottleDelaysGrow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	from := auth.LoginMeta{IP: "192.0.2.44"}
	for range auth.FailuresBeforeDelay {
		_, _, err := auth.Login(b.ctx, b.pool, u.Email, "typo", from)
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}

	var waits []time.Duration
	for range 8 {
		_, _, err := auth.Login(b.ctx, b.pool, u.Email, "typo", from)
		var te *auth.ThrottledError
		require.ErrorAs(t, err, &te)
		waits = append(waits, te.Wait.Round(time.Minute))
		// Waiting out the delay lets one more attempt through.
		b.passDelays(t, u.Email)
		_, _, err = auth.Login(b.ctx, b.pool, u.Email, "typo", from)
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	m := time.Minute
	require.Equal(t, []time.Duration{m, 2 * m, 4 * m, 8 * m, 16 * m, 32 * m, time.Hour, time.Hour}, waits)
	require.Equal(t, time.Minute, auth.FirstDelay)
	require.Equal(t, time.Hour, auth.MaxDelay)

	// Failures older than a day no longer count.
	_, err := b.pool.Exec(b.ctx, `UPDATE login_attempt SET at = at - interval '25 hours' WHERE email = $1`, u.Email)
	require.NoError(t, err)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, from)
	require.NoError(t, err)
}

// An IPv6 client is counted by its /64: hopping between the addresses of
// one network does not buy fresh attempts.
func TestLoginThrottleCountsIPv6ByNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	for i := range auth.FailuresBeforeDelay {
		ip := []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::5"}[i%5]
		_, _, err := auth.Login(b.ctx, b.pool, u.Email, "guess", auth.LoginMeta{IP: ip})
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	_, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "2001:db8:1:2::77"})
	require.ErrorIs(t, err, auth.ErrThrottled, "another address of the same /64")
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "2001:db8:1:3::1"})
	require.NoError(t, err, "another /64")

	// An IPv4-mapped IPv6 address is its IPv4 address.
	for range auth.FailuresBeforeDelay {
		_, _, err := auth.Login(b.ctx, b.pool, u.Email, "guess", auth.LoginMeta{IP: "192.0.2.80"})
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "::ffff:192.0.2.80"})
	require.ErrorIs(t, err, auth.ErrThrottled)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "192.0.2.81"})
	require.NoError(t, err, "the next IPv4 address is another client")
}

// passDelays moves email's sign-in attempts back by more than any delay
// (MaxDelay), and less than the day after which they stop counting.
func (b *bundle) passDelays(t *testing.T, email string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE login_attempt SET at = at - make_interval(secs => $2) WHERE email = $1`,
		email, (auth.MaxDelay + time.Minute).Seconds())
	require.NoError(t, err)
}
