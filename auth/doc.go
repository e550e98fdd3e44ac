// Package auth owns who someone is: users and their roles, passwords,
// sign-in sessions, login throttling and API tokens. It turns a session
// cookie or a bearer token into an [approval.Actor]; what that actor may do
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
//     limit holds across processes and restarts: after 5 failures for one
//     email since its last success, or 20 from one IP address, within 15
//     minutes, sign-in is refused with [ErrThrottled] (even with the right
//     password) until the window has passed;
//   - a session ends after 12 hours without use or 7 days after sign-in,
//     whichever comes first; a disabled user's sessions and tokens stop
//     working at once;
//   - an agent token acts for its user with the user's roles and Agent set,
//     so [approval.Authorize] refuses it every decision;
//   - the last enabled admin can be neither demoted nor disabled.
//
// Errors are typed: [ErrNotFound], [ErrConflict], [ErrBadCredentials],
// [ErrThrottled] (a [ThrottledError] says until when), [ErrDisabled],
// [ErrUnauthenticated], and validation errors that satisfy
// errors.Is(err, plan.ErrInvalid) and name the field at fault.
//
// Every function takes a [DB]: a pool or a transaction. Functions that need
// several statements to agree open a transaction (or a savepoint) on it.
package auth
