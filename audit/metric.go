package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/plan"
)

// Errors callers test with errors.Is.
var (
	// ErrNotFound: no such campaign or plan. It is plan.ErrNotFound, so
	// code that maps the plan package's errors maps this one too.
	ErrNotFound = plan.ErrNotFound
	// ErrNoPlan: the campaign has no frozen plan yet, so there is nothing
	// to audit.
	ErrNoPlan = errors.New("no approved plan")
	// ErrAmbiguous: a campaign name names more than one campaign.
	ErrAmbiguous = errors.New("ambiguous campaign name")
)

// DB is what the audit needs: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Evidence sources, as [Metric.Evidence] names them.
const (
	SourceMaildir     = "maildir"
	SourceProviderLog = "provider_log"
	SourceProbe       = "probe"
)

// Metric is the exactly-once audit of one plan (DESIGN §7). The JSON names
// of approved … holds are the external contract (GET
// /api/v1/campaigns/{id}/audit, `onceplan audit --json`).
type Metric struct {
	CampaignID  string `json:"campaign_id"`
	PlanID      int64  `json:"plan_id"`
	PlanVersion int    `json:"plan_version"`

	// Approved is the number of targets in the frozen plan.
	Approved int `json:"approved"`
	// ExactlyOnce: targets with exactly one done effect at their current epoch.
	ExactlyOnce int `json:"exactly_once"`
	// Missing: targets with no attempt at their current epoch (never
	// started, or bumped and not yet started again).
	Missing int `json:"missing"`
	// InDoubt is Pending + Unknown: the call may or may not have landed.
	InDoubt  int `json:"in_doubt"`
	Pending  int `json:"pending"`
	Unknown  int `json:"unknown"`
	Failed   int `json:"failed"`
	Stranded int `json:"stranded"`
	Revoked  int `json:"revoked"`
	// Duplicates: key+epochs of the plan's targets with more than one
	// effect in one evidence source (two maildir files, two log lines).
	// Always 0 without evidence: the ledger itself cannot hold two.
	Duplicates int `json:"duplicates"`
	// Unconfirmed: targets done in the ledger for which the evidence shows
	// nothing. Unrecorded: targets the evidence shows delivered that the
	// ledger does not have as done (pending, unknown, failed or missing).
	// Both are 0 without evidence.
	Unconfirmed int `json:"unconfirmed"`
	Unrecorded  int `json:"unrecorded"`
	// Evidence lists the sources reconciled (maildir, provider_log,
	// probe); empty means the ledger alone was counted.
	Evidence []string `json:"evidence"`
	// Holds: missing, in doubt and duplicates are all 0 (and so are
	// unconfirmed and unrecorded, when evidence was gathered).
	Holds bool `json:"holds"`
}

// finish derives InDoubt and Holds from the counts.
func (m *Metric) finish() {
	if m.Evidence == nil {
		m.Evidence = []string{}
	}
	m.InDoubt = m.Pending + m.Unknown
	m.Holds = m.Missing == 0 && m.InDoubt == 0 && m.Duplicates == 0 && m.Unconfirmed == 0 && m.Unrecorded == 0
}

// Headline is the campaign's one-line result, e.g. "998/1000 exactly once".
func (m Metric) Headline() string {
	verdict := "holds"
	if !m.Holds {
		var why []string
		for _, c := range []struct {
			n    int
			what string
		}{
			{m.Missing, "missing"}, {m.InDoubt, "in doubt"}, {m.Duplicates, "duplicated"},
			{m.Unconfirmed, "done without evidence"}, {m.Unrecorded, "delivered but not done in the ledger"},
		} {
			if c.n > 0 {
				why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
			}
		}
		verdict = "does not hold: " + strings.Join(why, ", ")
	}
	return fmt.Sprintf("%d/%d exactly once; %s", m.ExactlyOnce, m.Approved, verdict)
}

// ForPlan computes the metric of a frozen plan from the ledger alone, in
// one statement (one snapshot of the ledger). The statement runs in a
// transaction of its own (a savepoint when db is a transaction, whose JIT
// setting it then leaves off) with PostgreSQL's JIT compilation off.
func ForPlan(ctx context.Context, db DB, planID int64) (Metric, error) {
	m := Metric{PlanID: planID}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, noJIT); err != nil {
			return err
		}
		return tx.QueryRow(ctx, metricSQL, pgx.NamedArgs{"plan": planID}).Scan(
			&m.CampaignID, &m.PlanVersion, &m.Approved,
			&m.ExactlyOnce, &m.Pending, &m.Unknown, &m.Stranded, &m.Failed, &m.Revoked)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("%w: there is no plan %d", ErrNotFound, planID)
	}
	if err != nil {
		return m, fmt.Errorf("auditing plan %d: %w", planID, err)
	}
	m.Missing = m.Approved - m.ExactlyOnce - m.Pending - m.Unknown - m.Stranded - m.Failed - m.Revoked
	m.finish()
	return m, nil
}

// ForCampaign computes the metric of a campaign's current plan: the latest
// frozen one (a version being drafted after it does not count until it is
// approved). ErrNoPlan when nothing was approved yet.
func ForCampaign(ctx context.Context, db DB, campaignID string) (Metric, error) {
	planID, err := currentPlan(ctx, db, campaignID)
	if err != nil {
		return Metric{CampaignID: campaignID}, err
	}
	return ForPlan(ctx, db, planID)
}

func currentPlan(ctx context.Context, db DB, campaignID string) (int64, error) {
	if !isUUID(campaignID) {
		return 0, fmt.Errorf("%w: there is no campaign %q", ErrNotFound, campaignID)
	}
	var planID int64
	err := db.QueryRow(ctx, campaignPlan, campaignID).Scan(&planID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("%w: there is no campaign %s", ErrNotFound, campaignID)
	case err != nil:
		return 0, err
	case planID == 0:
		return 0, fmt.Errorf("%w: campaign %s has not been approved yet, so there is nothing to audit", ErrNoPlan, campaignID)
	}
	return planID, nil
}

// Campaign is a campaign as the audit names it.
type Campaign struct {
	ID     string
	Name   string
	PlanID int64 // 0: not approved yet
}

// FindCampaign resolves what an operator typed: a campaign id, or a
// campaign name that exactly one campaign has.
func FindCampaign(ctx context.Context, db DB, idOrName string) (Campaign, error) {
	var c Campaign
	if isUUID(idOrName) {
		err := db.QueryRow(ctx, campaignByID, idOrName).Scan(&c.ID, &c.Name, &c.PlanID)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return c, err
		}
	}
	rows, err := db.Query(ctx, campaignsByName, idOrName)
	if err != nil {
		return c, err
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Campaign, error) {
		var x Campaign
		err := r.Scan(&x.ID, &x.Name, &x.PlanID)
		return x, err
	})
	switch {
	case err != nil:
		return c, err
	case len(found) == 0:
		return c, fmt.Errorf("%w: there is no campaign with the id or name %q", ErrNotFound, idOrName)
	case len(found) > 1:
		return c, fmt.Errorf("%w: more than one campaign is named %q (%s, %s…): give the campaign's id", ErrAmbiguous, idOrName, found[0].ID, found[1].ID)
	}
	return found[0], nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
