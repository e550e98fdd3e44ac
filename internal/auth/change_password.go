package auth

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// ChangePasswordParams is a signed-in user's change of their own password.
type ChangePasswordParams struct {
	UserID int64
	// Current is the password the user signs in with now; New replaces it.
	Current string
	New     string
	// Meta is where the request comes from: the check of Current is
	// counted and throttled as a sign-in from there.
	Meta LoginMeta
}

// PasswordChange is what ChangePassword did.
type PasswordChange struct {
	// Token is a new session's, for the browser that asked: every session
	// the user had, that browser's included, has ended.
	Token string
	// Ended is how many sessions ended.
	Ended int64
}

// ChangePassword replaces a user's own password, once Current is the one
// they sign in with: a stolen session cookie alone cannot take the
// account over. The check is a sign-in attempt — recorded, and throttled
// as Login throttles (a *ThrottledError) — so the form is no faster an
// oracle for guessing than the sign-in page. A wrong Current is a
// *onceplan.FieldError on "current_password"; a New the policy refuses,
// or equal to Current, one on "password". On success every session of the
// user ends (whoever knew the old password is signed out everywhere) and
// a new one starts for the browser that asked; API tokens are left alone.
// The change is recorded in the administration trail, by the user.
func ChangePassword(ctx context.Context, db onceplan.DB, p ChangePasswordParams) (PasswordChange, error) {
	if err := ValidatePassword(p.New); err != nil {
		return PasswordChange{}, err
	}
	meta := LoginMeta{IP: truncate(p.Meta.IP, 64), UserAgent: truncate(p.Meta.UserAgent, 512)}
	client := clientKey(meta.IP)
	var (
		out     PasswordChange
		refusal error
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var (
			email string
			hash  *string
		)
		err := tx.QueryRow(ctx, `SELECT email, password_hash FROM app_user WHERE id = $1 AND disabled_at IS NULL`, p.UserID).Scan(&email, &hash)
		if errors.Is(err, pgx.ErrNoRows) {
			return onceplan.Errorf(onceplan.ErrUnauthenticated, "the session has ended or is not valid: sign in again")
		}
		if err != nil {
			return err
		}
		if err := lockAttempts(ctx, tx, email, client); err != nil {
			return err
		}
		var held *ThrottledError
		if err := throttled(ctx, tx, email, client); err != nil {
			switch {
			case errors.As(err, &held) && held.passwordChecked:
				// As Login: the address is held, not this account.
			case errors.Is(err, ErrThrottled):
				refusal = err
				return nil
			default:
				return err
			}
		}
		ok := false
		if hash != nil {
			if ok, err = VerifyPassword(*hash, p.Current); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO login_attempt (email, ip, ok) VALUES ($1, $2, $3)`, email, client, ok); err != nil {
			return err
		}
		switch {
		case !ok && held != nil:
			refusal = held
			return nil
		case !ok:
			refusal = fieldErr("current_password", "is not the password you sign in with")
			return nil
		case p.New == p.Current:
			refusal = fieldErr("password", "is your current password: choose another")
			return nil
		}
		newHash, err := HashPassword(p.New)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE app_user SET password_hash = $2 WHERE id = $1`, p.UserID, newHash); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM session WHERE user_id = $1`, p.UserID)
		if err != nil {
			return err
		}
		out.Ended = tag.RowsAffected()
		if out.Token, err = startSession(ctx, tx, p.UserID, meta); err != nil {
			return err
		}
		return RecordEvent(ctx, tx, p.UserID, EventUserPassword, email, map[string]any{"own": true, "sessions_ended": out.Ended})
	})
	if err != nil {
		return PasswordChange{}, err
	}
	if refusal != nil {
		return PasswordChange{}, refusal
	}
	return out, nil
}
