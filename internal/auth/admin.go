package auth

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// DefaultAdminEmail is the first admin's email when none is configured.
const DefaultAdminEmail = "admin@onceplan.local"

// EnsureAdmin makes sure someone can manage users: when no enabled user
// holds the admin role, it creates one with email (DefaultAdminEmail when
// empty) and password. An empty password is replaced by a generated one,
// returned so that the caller can show it once; it is not stored in clear
// anywhere. When an enabled admin exists it does nothing and returns
// created false. Concurrent callers (two servers starting at once) take
// turns, so at most one creates. The creation is recorded in the
// administration trail as done by who (the account and host of the
// process that started: nobody is signed in yet).
func EnsureAdmin(ctx context.Context, db onceplan.DB, who, email, password string) (created bool, generatedPassword string, err error) {
	if email == "" {
		email = DefaultAdminEmail
	}
	if password == "" {
		generatedPassword = GeneratePassword()
		password = generatedPassword
	}
	n := NewUser{Email: email, Name: "Administrator", Roles: []Role{RoleAdmin}, Password: password}
	if err := n.Validate(); err != nil {
		return false, "", err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('onceplan-ensure-admin', 0))`); err != nil {
			return err
		}
		var exists bool
		err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM app_user WHERE 'admin' = ANY (roles) AND disabled_at IS NULL)`).Scan(&exists)
		if err != nil || exists {
			return err
		}
		u, err := CreateUser(ctx, tx, n)
		if err != nil {
			return err
		}
		created = true
		return RecordCLIEvent(ctx, tx, who, EventUserAdd, u.Email, map[string]any{"roles": u.Roles, "first_admin": true})
	})
	if err != nil || !created {
		return false, "", err
	}
	return true, generatedPassword, nil
}
