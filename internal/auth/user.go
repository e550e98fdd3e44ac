package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// MaxNameLength bounds a user's display name, in characters.
const MaxNameLength = 200

// User is a person who signs in (or owns API tokens). The password hash
// never leaves this package.
type User struct {
	ID         int64      `json:"id"`
	Email      string     `json:"email"`
	Name       string     `json:"name"`
	Roles      []Role     `json:"roles"`
	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

// Disabled reports whether the user may no longer sign in or use tokens.
func (u User) Disabled() bool { return u.DisabledAt != nil }

// Actor is the user acting in person.
func (u User) Actor() Actor {
	return Actor{UserID: u.ID, Email: u.Email, Roles: slices.Clone(u.Roles)}
}

// NewUser is what creating a user takes.
type NewUser struct {
	Email    string
	Name     string
	Roles    []Role
	Password string
}

// Validate checks every field, returning the first fault as a
// *onceplan.FieldError (errors.Is(err, onceplan.ErrInvalid)).
func (n NewUser) Validate() error {
	_, err := n.normalize()
	return err
}

func (n NewUser) normalize() (NewUser, error) {
	email, err := normalizeEmail(n.Email)
	if err != nil {
		return n, err
	}
	roles, err := normalizeRoles(n.Roles)
	if err != nil {
		return n, err
	}
	name := strings.TrimSpace(n.Name)
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxNameLength {
		return n, fieldErr("name", "must be valid text of at most %d characters", MaxNameLength)
	}
	if err := ValidatePassword(n.Password); err != nil {
		return n, err
	}
	return NewUser{Email: email, Name: name, Roles: roles, Password: n.Password}, nil
}

func normalizeEmail(s string) (string, error) {
	email, err := ledger.NormalizeEmail(s)
	if err != nil {
		return "", fieldErr("email", "%s", err.Error())
	}
	return email, nil
}

// normalizeRoles checks each role, drops repeats and puts them in the
// order of Roles. A user needs at least one.
func normalizeRoles(in []Role) ([]Role, error) {
	if len(in) == 0 {
		return nil, fieldErr("roles", "name at least one role (admin, proposer, approver, operator, viewer)")
	}
	for _, r := range in {
		if _, err := ParseRole(string(r)); err != nil {
			return nil, fieldErr("roles", "%s", err.Error())
		}
	}
	out := make([]Role, 0, len(in))
	for _, r := range Roles {
		if slices.Contains(in, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

func roleStrings(roles []Role) []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = string(r)
	}
	return out
}

const userCols = `id, email, name, roles, created_at, disabled_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	var roles []string
	err := row.Scan(&u.ID, &u.Email, &u.Name, &roles, &u.CreatedAt, &u.DisabledAt)
	if err != nil {
		return User{}, err
	}
	u.Roles = make([]Role, len(roles))
	for i, r := range roles {
		u.Roles[i] = Role(r)
	}
	return u, nil
}

func userNotFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return onceplan.Errorf(onceplan.ErrNotFound, "there is no user %s", what)
	}
	return err
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// CreateUser validates n, hashes the password and inserts the user. An
// email already taken is an onceplan.ErrConflict.
func CreateUser(ctx context.Context, db onceplan.DB, n NewUser) (User, error) {
	n, err := n.normalize()
	if err != nil {
		return User{}, err
	}
	hash, err := HashPassword(n.Password)
	if err != nil {
		return User{}, err
	}
	u, err := scanUser(db.QueryRow(ctx, `
		INSERT INTO app_user (email, name, roles, password_hash) VALUES ($1, $2, $3, $4)
		RETURNING `+userCols, n.Email, n.Name, roleStrings(n.Roles), hash))
	if isUniqueViolation(err) {
		return User{}, onceplan.Errorf(onceplan.ErrConflict, "a user with the email %s already exists", n.Email)
	}
	return u, err
}

// GetUser returns the user with id.
func GetUser(ctx context.Context, db onceplan.DB, id int64) (User, error) {
	u, err := scanUser(db.QueryRow(ctx, `SELECT `+userCols+` FROM app_user WHERE id = $1`, id))
	return u, userNotFound(err, "with that id")
}

// GetUserByEmail returns the user with email (normalised first, so
// " Ann@Example.COM" finds ann@example.com).
func GetUserByEmail(ctx context.Context, db onceplan.DB, email string) (User, error) {
	norm, err := normalizeEmail(email)
	if err != nil {
		return User{}, err
	}
	u, err := scanUser(db.QueryRow(ctx, `SELECT `+userCols+` FROM app_user WHERE email = $1`, norm))
	return u, userNotFound(err, norm)
}

// ListUsers returns every user, disabled ones included, by email.
func ListUsers(ctx context.Context, db onceplan.DB) ([]User, error) {
	rows, err := db.Query(ctx, `SELECT `+userCols+` FROM app_user ORDER BY email`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (User, error) { return scanUser(row) })
}

// SetRoles replaces the user's roles. Taking the admin role from the last
// enabled admin is an onceplan.ErrConflict: nobody could manage users after it.
func SetRoles(ctx context.Context, db onceplan.DB, email string, roles []Role) (User, error) {
	norm, err := normalizeEmail(email)
	if err != nil {
		return User{}, err
	}
	roles, err = normalizeRoles(roles)
	if err != nil {
		return User{}, err
	}
	var u User
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if !slices.Contains(roles, RoleAdmin) {
			if err := keepAnAdmin(ctx, tx, norm, "take the admin role from"); err != nil {
				return err
			}
		}
		u, err = scanUser(tx.QueryRow(ctx, `UPDATE app_user SET roles = $2 WHERE email = $1 RETURNING `+userCols,
			norm, roleStrings(roles)))
		return userNotFound(err, norm)
	})
	return u, err
}

// keepAnAdmin refuses a change that would leave no enabled admin: it locks
// every enabled admin's row (so two such changes take turns) and checks
// that one other than email remains.
func keepAnAdmin(ctx context.Context, tx pgx.Tx, email, doing string) error {
	rows, err := tx.Query(ctx, `
		SELECT email FROM app_user WHERE 'admin' = ANY (roles) AND disabled_at IS NULL
		ORDER BY id FOR UPDATE`)
	if err != nil {
		return err
	}
	admins, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if slices.Contains(admins, email) && len(admins) == 1 {
		return onceplan.Errorf(onceplan.ErrConflict, "cannot %s %s: it is the last enabled admin (give another user the admin role first)", doing, email)
	}
	return nil
}

// SetPassword replaces the user's password and ends every session the
// user has, so a password change locks out whoever knew the old one.
// API tokens are left alone (revoke them separately).
func SetPassword(ctx context.Context, db onceplan.DB, email, password string) error {
	norm, err := normalizeEmail(email)
	if err != nil {
		return err
	}
	if err := ValidatePassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `UPDATE app_user SET password_hash = $2 WHERE email = $1 RETURNING id`, norm, hash).Scan(&id)
		if err != nil {
			return userNotFound(err, norm)
		}
		_, err = tx.Exec(ctx, `DELETE FROM session WHERE user_id = $1`, id)
		return err
	})
}

// DisableUser stops the user signing in, ends their sessions and makes
// their API tokens stop working (until EnableUser). Disabling a disabled
// user changes nothing; disabling the last enabled admin is an onceplan.ErrConflict.
func DisableUser(ctx context.Context, db onceplan.DB, email string) (User, error) {
	norm, err := normalizeEmail(email)
	if err != nil {
		return User{}, err
	}
	var u User
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := keepAnAdmin(ctx, tx, norm, "disable"); err != nil {
			return err
		}
		u, err = scanUser(tx.QueryRow(ctx, `
			UPDATE app_user SET disabled_at = coalesce(disabled_at, now()) WHERE email = $1
			RETURNING `+userCols, norm))
		if err != nil {
			return userNotFound(err, norm)
		}
		_, err = tx.Exec(ctx, `DELETE FROM session WHERE user_id = $1`, u.ID)
		return err
	})
	return u, err
}

// EnableUser undoes DisableUser. Tokens not revoked meanwhile work again.
func EnableUser(ctx context.Context, db onceplan.DB, email string) (User, error) {
	norm, err := normalizeEmail(email)
	if err != nil {
		return User{}, err
	}
	u, err := scanUser(db.QueryRow(ctx, `UPDATE app_user SET disabled_at = NULL WHERE email = $1 RETURNING `+userCols, norm))
	return u, userNotFound(err, norm)
}

// Emails maps each of ids that names a user to the user's email.
func Emails(ctx context.Context, db onceplan.DB, ids []int64) (map[int64]string, error) {
	out := map[int64]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT id, email FROM app_user WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	var id int64
	var email string
	_, err = pgx.ForEachRow(rows, []any{&id, &email}, func() error {
		out[id] = email
		return nil
	})
	return out, err
}
