package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

// AdminBootstrap is the result of EnsureAdmin.
type AdminBootstrap struct {
	Created bool
	Email   string
	// Password is set only when it was generated: the caller shows it once.
	Password string
}

// EnsureAdmin makes sure someone can sign in and manage users: when no
// enabled admin exists it creates one, with email and password when given
// (ONCEPLAN_ADMIN_EMAIL, ONCEPLAN_ADMIN_PASSWORD), else the default email
// and a generated password. who names the process's account and host for
// the administration trail.
func EnsureAdmin(ctx context.Context, pool *pgxpool.Pool, who, email, password string) (AdminBootstrap, error) {
	if email == "" {
		email = auth.DefaultAdminEmail
	}
	created, generated, err := auth.EnsureAdmin(ctx, pool, who, email, password)
	if err != nil {
		return AdminBootstrap{}, fmt.Errorf("creating the first admin: %w", err)
	}
	return AdminBootstrap{Created: created, Email: email, Password: generated}, nil
}

// DemoProposer proposes the demo campaign, so that the admin (who did not
// propose it) may approve it.
const DemoProposer = "demo-proposer@onceplan.local"

// DemoTargets is the demo campaign's size. `make run` slows the demo's
// provider to 5 messages a second, so that the run lasts about a minute:
// long enough to watch the counts, and to kill the process halfway.
const DemoTargets = 300

// DemoOptions shape the demo campaign.
type DemoOptions struct {
	Provider string
	Targets  int // 0: DemoTargets
	// Who names the process's account and host for the administration
	// trail, which records the demo proposer it makes (as EnsureAdmin's).
	Who string
}

// EnsureDemo creates, on a database with no campaign yet, a demo campaign
// of opts.Targets recipients on opts.Provider, submitted for approval. It
// returns the campaign id, or "" when campaigns already existed.
func EnsureDemo(ctx context.Context, pool *pgxpool.Pool, svc *approval.Service, opts DemoOptions) (string, error) {
	if opts.Targets == 0 {
		opts.Targets = DemoTargets
	}
	exists, err := approval.AnyCampaign(ctx, pool)
	if err != nil {
		return "", err
	}
	if exists {
		return "", nil
	}
	u, err := auth.GetUserByEmail(ctx, pool, DemoProposer)
	if err != nil {
		// Made like any other user: in the administration trail, as done
		// by the process that started (nobody is signed in yet).
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if u, err = auth.CreateUser(ctx, tx, auth.NewUser{
				Email: DemoProposer, Name: "Demo proposer", Roles: []auth.Role{auth.RoleProposer},
				Password: auth.GeneratePassword(),
			}); err != nil {
				return err
			}
			return auth.RecordCLIEvent(ctx, tx, opts.Who, auth.EventUserAdd, u.Email, map[string]any{"roles": u.Roles, "demo": true})
		})
		if err != nil {
			return "", fmt.Errorf("creating the demo proposer: %w", err)
		}
	}
	var csv strings.Builder
	csv.WriteString("email,first_name\n")
	for i := 1; i <= opts.Targets; i++ {
		fmt.Fprintf(&csv, "reader%03d@example.com,Reader %d\n", i, i)
	}
	res, err := svc.Create(ctx, u.Actor(), approval.CreateParams{
		Name: "Demo: welcome note", Provider: opts.Provider, RequiredApprovals: 1,
		Payload: plan.Payload{
			From:    "Onceplan demo <demo@onceplan.local>",
			Subject: "Welcome, {{.first_name}}",
			Text:    "Hello {{.first_name}},\n\nthis note reaches you exactly once.\n",
			HTML:    "<p>Hello <strong>{{.first_name}}</strong>,</p><p>this note reaches you exactly once.</p>",
		},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv.String())},
	})
	if err != nil {
		return "", fmt.Errorf("creating the demo campaign: %w", err)
	}
	if _, err := svc.Submit(ctx, u.Actor(), res.Campaign.ID); err != nil {
		return "", fmt.Errorf("submitting the demo campaign: %w", err)
	}
	return res.Campaign.ID, nil
}
