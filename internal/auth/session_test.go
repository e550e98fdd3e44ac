package auth_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/onceplan"
)

func TestLogin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{Email: "ann@example.com", Roles: []auth.Role{auth.RoleProposer, auth.RoleOperator}})

	token, got, err := auth.Login(b.ctx, b.pool, " ANN@example.com", goodPassword, auth.LoginMeta{IP: "192.0.2.1", UserAgent: "test"})
	require.NoError(t, err)
	require.Equal(t, u, got)
	require.Len(t, token, 43)

	// Only the token's hash is stored, with the lifetimes.
	var n int
	var absolute int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT count(*), max(extract(epoch FROM expires_at - created_at))::bigint
		FROM session WHERE id = sha256(convert_to($1, 'UTF8')) AND user_id = $2 AND ip = '192.0.2.1' AND user_agent = 'test'`,
		token, u.ID).Scan(&n, &absolute))
	require.Equal(t, 1, n)
	require.Equal(t, int64((7 * 24 * time.Hour).Seconds()), absolute)
	var leaked bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM session s WHERE row_to_json(s)::text LIKE '%' || $1 || '%')`, token).Scan(&leaked))
	require.False(t, leaked)

	actor, su, err := auth.SessionActor(b.ctx, b.pool, token)
	require.NoError(t, err)
	require.Equal(t, auth.Actor{UserID: u.ID, Email: "ann@example.com", Roles: []auth.Role{auth.RoleProposer, auth.RoleOperator}}, actor)
	require.Equal(t, u, su)
	require.NoError(t, auth.Authorize(actor, auth.ActionStart))
	require.ErrorIs(t, auth.Authorize(actor, auth.ActionApprove), onceplan.ErrForbidden)

	require.NoError(t, auth.Logout(b.ctx, b.pool, token))
	_, _, err = auth.SessionActor(b.ctx, b.pool, token)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)
	require.NoError(t, auth.Logout(b.ctx, b.pool, token), "logging out twice is fine")
}

func TestLoginWrongPasswordAndUnknownUserLookAlike(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})

	_, _, wrong := auth.Login(b.ctx, b.pool, u.Email, "not the password", auth.LoginMeta{})
	_, _, unknown := auth.Login(b.ctx, b.pool, "nobody@example.com", goodPassword, auth.LoginMeta{})
	_, _, invalid := auth.Login(b.ctx, b.pool, "not an address", goodPassword, auth.LoginMeta{})
	for _, err := range []error{wrong, unknown, invalid} {
		require.ErrorIs(t, err, auth.ErrBadCredentials)
		require.Equal(t, "the email or password is wrong", err.Error())
	}

	// Both cost one argon2id verification: their times are of one order
	// (a loose bound: this guards against skipping the work, not against
	// a statistical timing attack).
	timeOf := func(email, password string) time.Duration {
		start := time.Now()
		_, _, err := auth.Login(b.ctx, b.pool, email, password, auth.LoginMeta{})
		require.ErrorIs(t, err, auth.ErrBadCredentials)
		return time.Since(start)
	}
	timeOf("warm-up@example.com", "x") // the first unknown email computes the dummy hash
	other := b.user(t, userOpts{})
	var wrongT, unknownT time.Duration
	for i := range 3 {
		// Separate unknown emails, and 3 failures for other, so the
		// throttle does not step in.
		unknownT += timeOf(fmt.Sprintf("nobody%d@example.com", i), goodPassword)
		wrongT += timeOf(other.Email, "not the password")
	}
	require.Greater(t, unknownT, wrongT/3, "an unknown user must cost about as much as a wrong password")
	require.Greater(t, wrongT, unknownT/3)
}

func TestLoginThrottledPerEmail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})

	for range auth.FailuresBeforeDelay {
		_, _, err := auth.Login(b.ctx, b.pool, u.Email, "not the password", auth.LoginMeta{IP: "192.0.2.7"})
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	_, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "192.0.2.7"})
	require.ErrorIs(t, err, auth.ErrThrottled, "even the right password, from that address")
	var te *auth.ThrottledError
	require.ErrorAs(t, err, &te)
	require.InDelta(t, auth.FirstDelay.Seconds(), te.Wait.Seconds(), 5)
	require.Regexp(t, `^too many failed sign-in attempts: try again in 1 minute \(after \d\d:\d\d UTC\)$`, err.Error())

	// Another account is not affected.
	other := b.user(t, userOpts{})
	_, _, err = auth.Login(b.ctx, b.pool, other.Email, goodPassword, auth.LoginMeta{IP: "198.51.100.1"})
	require.NoError(t, err)

	// Once the delay has passed, the right password works.
	_, err = b.pool.Exec(b.ctx, `UPDATE login_attempt SET at = at - interval '16 minutes' WHERE email = $1`, u.Email)
	require.NoError(t, err)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{IP: "192.0.2.7"})
	require.NoError(t, err)
}

func TestLoginThrottleUnknownEmailToo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range auth.FailuresBeforeDelay {
		_, _, err := auth.Login(b.ctx, b.pool, "nobody@example.com", "guess", auth.LoginMeta{})
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	_, _, err := auth.Login(b.ctx, b.pool, "nobody@example.com", "guess", auth.LoginMeta{})
	require.ErrorIs(t, err, auth.ErrThrottled, "an unknown email is throttled like a known one")
}

func TestLoginSuccessResetsEmailCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	fail := func() {
		_, _, err := auth.Login(b.ctx, b.pool, u.Email, "typo typo typo", auth.LoginMeta{})
		require.ErrorIs(t, err, auth.ErrBadCredentials)
	}
	for range auth.FailuresBeforeDelay - 1 {
		fail()
	}
	_, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err)
	fail()
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err, "failures before a success no longer count")
}

func TestLoginThrottledPerIP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	// Failures spread over many emails from one address.
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO login_attempt (email, ip, ok)
		SELECT 'spray' || i || '@example.com', '203.0.113.9', false FROM generate_series(1, $1) i`, auth.MaxFailuresPerIP)
	require.NoError(t, err)

	held := auth.LoginMeta{IP: "203.0.113.9"}

	// Another account from the held address: its right password is
	// checked all the same, and signs in (an owner sharing the sprayer's
	// address, behind one proxy or NAT, is not locked out).
	_, got, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, held)
	require.NoError(t, err, "the address's hold does not block the right password of an account without failures of its own")
	require.Equal(t, u.ID, got.ID)

	// A wrong password under the hold is refused as held, and counted:
	// that account is held from there on, the right password too, so a
	// sprayer gets one guess per account while the hold lasts.
	v := b.user(t, userOpts{})
	_, _, err = auth.Login(b.ctx, b.pool, v.Email, "spray guess", held)
	var te *auth.ThrottledError
	require.ErrorAs(t, err, &te)
	require.Equal(t, auth.ThrottleAddress, te.Scope)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM login_attempt WHERE email = $1 AND NOT ok`, v.Email).Scan(&n))
	require.Equal(t, 1, n, "the guess under the hold is counted")
	_, _, err = auth.Login(b.ctx, b.pool, v.Email, goodPassword, held)
	require.ErrorIs(t, err, auth.ErrThrottled, "an account with a failure of its own from the held address waits out the hold")
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM login_attempt WHERE email = $1`, v.Email).Scan(&n))
	require.Equal(t, 1, n, "a refused attempt is not recorded")

	_, _, err = auth.Login(b.ctx, b.pool, v.Email, goodPassword, auth.LoginMeta{IP: "203.0.113.10"})
	require.NoError(t, err, "another address is not affected")
}

// Parallel guesses take turns, so no more than the limit get a verdict.
func TestLoginThrottleHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		bad, thr   int
		unexpected []error
	)
	for range 12 {
		wg.Go(func() {
			_, _, err := auth.Login(b.ctx, b.pool, u.Email, "parallel guess", auth.LoginMeta{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				unexpected = append(unexpected, fmt.Errorf("a wrong password signed in"))
			case errors.Is(err, auth.ErrBadCredentials):
				bad++
			case errors.Is(err, auth.ErrThrottled):
				thr++
			default:
				unexpected = append(unexpected, err)
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the concurrent sign-ins to end")
	require.Empty(t, unexpected)
	require.Equal(t, auth.FailuresBeforeDelay, bad)
	require.Equal(t, 12-auth.FailuresBeforeDelay, thr)
}

func TestLoginDisabledUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	token, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err)

	_, err = auth.DisableUser(b.ctx, b.pool, u.Email)
	require.NoError(t, err)
	_, _, err = auth.SessionActor(b.ctx, b.pool, token)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated, "disabling ends the sessions")

	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.ErrorIs(t, err, auth.ErrDisabled)
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, "not the password", auth.LoginMeta{})
	require.ErrorIs(t, err, auth.ErrBadCredentials, "without the password, disabled is not revealed")
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	login := func() string {
		token, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
		require.NoError(t, err)
		return token
	}

	absolute := login()
	_, err := b.pool.Exec(b.ctx, `UPDATE session SET expires_at = now() - interval '1 second' WHERE id = sha256(convert_to($1, 'UTF8'))`, absolute)
	require.NoError(t, err)
	_, _, err = auth.SessionActor(b.ctx, b.pool, absolute)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)

	idle := login()
	_, err = b.pool.Exec(b.ctx, `UPDATE session SET last_seen_at = now() - interval '12 hours 1 second' WHERE id = sha256(convert_to($1, 'UTF8'))`, idle)
	require.NoError(t, err)
	_, _, err = auth.SessionActor(b.ctx, b.pool, idle)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)

	pruned, err := auth.Prune(b.ctx, b.pool)
	require.NoError(t, err)
	require.EqualValues(t, 2, pruned)

	for _, bogus := range []string{"", "x", absolute + "x"} {
		_, _, err = auth.SessionActor(b.ctx, b.pool, bogus)
		require.ErrorIs(t, err, onceplan.ErrUnauthenticated)
	}
}

func TestSessionSlidesAtMostOnceAMinute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	token, _, err := auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err)
	seen := func() time.Time {
		var at time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT last_seen_at FROM session WHERE id = sha256(convert_to($1, 'UTF8'))`, token).Scan(&at))
		return at
	}

	// Seen 30 seconds ago: not written again.
	_, err = b.pool.Exec(b.ctx, `UPDATE session SET last_seen_at = now() - interval '30 seconds'`)
	require.NoError(t, err)
	before := seen()
	_, _, err = auth.SessionActor(b.ctx, b.pool, token)
	require.NoError(t, err)
	require.Equal(t, before, seen())

	// Seen 11 hours ago: refreshed, so the idle timeout starts again.
	_, err = b.pool.Exec(b.ctx, `UPDATE session SET last_seen_at = now() - interval '11 hours'`)
	require.NoError(t, err)
	before = seen()
	_, _, err = auth.SessionActor(b.ctx, b.pool, token)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), seen(), time.Minute)
	require.True(t, seen().After(before))
}

func TestLoginRehashesOldParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u := b.user(t, userOpts{})
	// A hash made by libargon2 with m=64 MiB, t=1, p=4, for goodPassword.
	const old = "$argon2id$v=19$m=65536,t=1,p=4$b25jZXBsYW4tc2FsdC0xNg$Ymc5Ey1i6r8begme+w+SODxB3tRAwhxQe0cWqUIBUrY"
	_, err := b.pool.Exec(b.ctx, `UPDATE app_user SET password_hash = $2 WHERE id = $1`, u.ID, old)
	require.NoError(t, err)

	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err)
	var hash string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT password_hash FROM app_user WHERE id = $1`, u.ID).Scan(&hash))
	require.False(t, auth.NeedsRehash(hash))
	_, _, err = auth.Login(b.ctx, b.pool, u.Email, goodPassword, auth.LoginMeta{})
	require.NoError(t, err)
}
