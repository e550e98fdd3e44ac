package auth

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/keyedrate"
)

// Throttling of failed sign-ins (see the package comment).
//
// Failures are counted per account and client address, so that a
// stranger's guesses slow down the stranger, never the account's owner
// signing in from elsewhere: FailuresBeforeDelay failures of one account
// from one address (since its last success from there) are free, and each
// further attempt waits for a delay that starts at FirstDelay after the
// last failure and doubles with every failure, up to MaxDelay. Failures
// older than throttleMemory no longer count.
//
// Against one address guessing the passwords of many accounts (password
// spraying), MaxFailuresPerIP failures from one address within
// ThrottleWindow, whatever the accounts, hold that address until the
// oldest of them leaves the window. The hold must not lock out the
// owners who share the address — everyone behind one reverse proxy or
// one NAT shares it, and a stranger's random guesses would otherwise keep
// them all out — so it holds back only the accounts that have failures
// of their own from that address (since their last success there): for
// an account with none, the password is still checked, the right one
// signs in, and a wrong one is refused as held and counted, so that the
// sprayer gets one guess per account while the hold lasts, and the
// account's own count takes over from there.
const (
	FailuresBeforeDelay = 5
	FirstDelay          = time.Minute
	MaxDelay            = time.Hour
	ThrottleWindow      = 15 * time.Minute
	MaxFailuresPerIP    = 20
	// throttleMemory is how long a failure counts towards the delay; Prune
	// deletes attempts older than this.
	throttleMemory = 24 * time.Hour
)

// ThrottleScope says which count refused a sign-in.
type ThrottleScope string

const (
	// ThrottleAccount: this account's failures from this address.
	ThrottleAccount ThrottleScope = "account"
	// ThrottleAddress: this address's failures, whatever the accounts.
	ThrottleAddress ThrottleScope = "address"
)

// clientKey is the address sign-in attempts are counted under: the key
// every per-client limit counts by (keyedrate.ClientKey), so that an IPv6
// client is one /64 here as at the unsubscribe links and the webhooks.
func clientKey(ip string) string { return keyedrate.ClientKey(ip) }

// delayAfter is the wait before the next attempt after failures failures
// of one account from one address: none up to FailuresBeforeDelay, then
// FirstDelay, doubling with each failure, at most MaxDelay.
func delayAfter(failures int) time.Duration {
	if failures < FailuresBeforeDelay {
		return 0
	}
	d := FirstDelay
	for range failures - FailuresBeforeDelay {
		if d >= MaxDelay {
			break
		}
		d *= 2
	}
	return min(d, MaxDelay)
}

// lockAttempts makes attempts for one account from one address, and all
// attempts from one address, take turns, so that a burst of parallel
// guesses cannot all pass the counts of throttled. An empty ip takes only
// the account's turn.
func lockAttempts(ctx context.Context, tx pgx.Tx, email, ip string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('onceplan-login-account:' || $1 || ' ' || $2, 0))`, email, ip); err != nil {
		return err
	}
	if ip == "" {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('onceplan-login-ip:' || $1, 0))`, ip)
	return err
}

// throttled returns a *ThrottledError when email's failures from ip since
// its last success from there call for a delay that has not passed yet, or
// when ip has MaxFailuresPerIP failures within ThrottleWindow. The
// latter's passwordChecked is set when email has no failures of its own
// from ip: Login then checks the password (see the comment above). An
// empty ip is counted per account only. Call it after lockAttempts, in the
// same transaction.
func throttled(ctx context.Context, tx pgx.Tx, email, ip string) error {
	var (
		failures int
		last     *time.Time
		now      time.Time
	)
	err := tx.QueryRow(ctx, `
		SELECT count(*), max(at), now() FROM login_attempt
		WHERE email = $1 AND ip = $2 AND NOT ok AND at > now() - make_interval(secs => $3)
		  AND at > coalesce((SELECT max(at) FROM login_attempt WHERE email = $1 AND ip = $2 AND ok), '-infinity')`,
		email, ip, throttleMemory.Seconds()).Scan(&failures, &last, &now)
	if err != nil {
		return err
	}
	if d := delayAfter(failures); d > 0 {
		if until := last.Add(d); until.After(now) {
			return &ThrottledError{Until: until, Wait: until.Sub(now), Scope: ThrottleAccount}
		}
	}
	if ip == "" {
		return nil
	}
	var until time.Time
	err = tx.QueryRow(ctx, `
		SELECT at + make_interval(secs => $3), now() FROM login_attempt
		WHERE ip = $1 AND NOT ok AND at > now() - make_interval(secs => $3)
		ORDER BY at DESC OFFSET $2 - 1 LIMIT 1`,
		ip, MaxFailuresPerIP, ThrottleWindow.Seconds()).Scan(&until, &now)
	if err == nil {
		return &ThrottledError{Until: until, Wait: until.Sub(now), Scope: ThrottleAddress, passwordChecked: failures == 0}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}
