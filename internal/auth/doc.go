// Package auth owns who someone is: users and their roles, passwords,
// sign-in sessions, login throttling and API tokens. It turns a session
// cookie or a bearer token into an [Actor]; what that actor may do
// is package approval's business.
//
// Guarantees:
//   - no secret is stored in clear: passwords are argon2id hashes in the PHC
//     string format, and session and API tokens are stored as the SHA-256 of
//     the secret the client holds, so a copy of the database lets nobody in;
//   - signing in with a wrong password and with an unknown email take the
//     same work (one argon2id verification) and give the same error,
//     [ErrBadCredentials], so the sign-in form does not reveal who has an
//     account;
//   - failed sign-ins are counted in PostgreSQL (table login_attempt), so the
//     limits hold across processes and restarts. They are counted per
//     account and client address (an IPv6 address by its /64), so a
//     stranger's failures never keep the owner out from another address:
//     after 5 failures of one account from one address since its last
//     success there, each further attempt from there waits 1 minute after
//     the last failure, doubling with each failure up to an hour. Against
//     password spraying, 20 failures from one address within 15 minutes,
//     whatever the accounts, refuse that address until the oldest leaves the
//     window. A refused attempt gets [ErrThrottled] (even with the right
//     password), is not counted and does not extend the wait;
//   - a session ends after 12 hours without use or 7 days after sign-in,
//     whichever comes first; a disabled user's sessions and tokens stop
//     working at once;
//   - an agent token acts for its user with the user's roles and Agent set,
//     so [Authorize] refuses it every decision;
//   - the last enabled admin can be neither demoted nor disabled.
//
// Errors are typed: [onceplan.ErrNotFound], [onceplan.ErrConflict], [ErrBadCredentials],
// [ErrThrottled] (a [ThrottledError] says until when), [ErrDisabled],
// [onceplan.ErrUnauthenticated], and validation errors that satisfy
// errors.Is(err, onceplan.ErrInvalid) and name the field at fault.
//
// Every function takes a [onceplan.DB]: a pool or a transaction. Functions that need
// several statements to agree open a transaction (or a savepoint) on it.
package auth
