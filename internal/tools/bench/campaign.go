package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/plan"
)

// startCampaign creates, submits, approves and starts a campaign of n
// targets on provider through svc (nil: an insert-only River client's
// enqueuer, as `onceplan serve` has when the workers run elsewhere). It
// returns the campaign id and its plan id.
func startCampaign(ctx context.Context, pool *pgxpool.Pool, svc *approval.Service, name, providerName string, n int) (string, int64, error) {
	if svc == nil {
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		if err != nil {
			return "", 0, err
		}
		svc = approval.NewService(pool, jobs.NewEnqueuer(client))
	}
	svc.MaxTargets = max(svc.MaxTargets, n)
	proposer, err := user(ctx, pool, "run-proposer@example.com", auth.RoleProposer)
	if err != nil {
		return "", 0, err
	}
	approver, err := user(ctx, pool, "run-approver@example.com", auth.RoleApprover, auth.RoleOperator)
	if err != nil {
		return "", 0, err
	}
	res, err := svc.Create(ctx, proposer, approval.CreateParams{
		Name: name, Provider: providerName,
		Payload: plan.Payload{From: "bench@example.com", Subject: "Hello {{.first_name}}", Text: "Hi {{.first_name}} from {{.city}}"},
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: &csvGen{n: n}},
	})
	if err != nil {
		return "", 0, fmt.Errorf("create: %w", err)
	}
	sub, err := svc.Submit(ctx, proposer, res.Campaign.ID)
	if err != nil {
		return "", 0, fmt.Errorf("submit: %w", err)
	}
	if _, err := svc.Approve(ctx, approver, res.Campaign.ID, sub.PlanHash); err != nil {
		return "", 0, fmt.Errorf("approve: %w", err)
	}
	if _, err := svc.Start(ctx, approver, res.Campaign.ID); err != nil {
		return "", 0, fmt.Errorf("start: %w", err)
	}
	var planID int64
	if err := pool.QueryRow(ctx, `SELECT plan_id FROM campaign WHERE id = $1`, res.Campaign.ID).Scan(&planID); err != nil {
		return "", 0, err
	}
	return res.Campaign.ID, planID, nil
}

// doneCount is the number of the plan's effects settled done.
func doneCount(ctx context.Context, pool *pgxpool.Pool, planID int64) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE plan_id = $1 AND state = 'done'`, planID).Scan(&n)
	return n, err
}
