// The campaign, its draft versions and its states: approval owns their
// rows, reads and writes (docs/ARCHITECTURE.md, "The parts").

package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// State is a campaign's place in its life (the transitions are package
// approval's).
type State string

// Campaign states.
const (
	StateDraft           State = "draft"
	StatePendingApproval State = "pending_approval"
	StateApproved        State = "approved"
	StateRunning         State = "running"
	StatePaused          State = "paused"
	StateCompleted       State = "completed"
	StateCancelled       State = "cancelled"
)

// Campaign is a named intent that owns drafts and plans.
type Campaign struct {
	ID                string     `json:"id"`
	Name              string     `json:"name"`
	Provider          string     `json:"provider"`
	Tool              string     `json:"tool"`
	ScheduledAt       *time.Time `json:"scheduled_at,omitempty"`
	StartOnApproval   bool       `json:"start_on_approval"`
	RequiredApprovals int        `json:"required_approvals"`
	// ListUnsubscribe: its messages carry a one-click unsubscribe link
	// (List-Unsubscribe, RFC 8058); false for a transactional campaign.
	// Fixed at create.
	ListUnsubscribe bool      `json:"list_unsubscribe"`
	State           State     `json:"state"`
	Version         int       `json:"version"`
	PlanID          int64     `json:"plan_id,omitempty"`
	CreatedBy       int64     `json:"created_by"`
	CreatedByAgent  bool      `json:"created_by_agent"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	// ArchivedAt is when `onceplan archive` moved its ledger rows out of
	// the hot tables (docs/ARCHITECTURE.md, "The archive"); nil until then.
	// An archived campaign never runs again.
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// newCampaign is what creating a campaign takes.
type newCampaign struct {
	Name              string
	Provider          string
	Tool              string // default "email.send"
	ScheduledAt       *time.Time
	StartOnApproval   bool
	RequiredApprovals int // default 1
	// Transactional: the messages carry no unsubscribe link (the
	// campaign's ListUnsubscribe is false).
	Transactional bool
	Payload       plan.Payload
	CreatedBy     int64
	ViaAgent      bool
}

// Validate checks a new campaign's fields, naming the first at fault.
func (n *newCampaign) Validate() error {
	if n.Tool == "" {
		n.Tool = "email.send"
	}
	if n.RequiredApprovals == 0 {
		n.RequiredApprovals = 1
	}
	if err := plan.NoNUL("name", n.Name); err != nil {
		return err
	}
	switch {
	case len(n.Name) == 0 || len(n.Name) > 200 || n.Name != strings.TrimSpace(n.Name):
		return onceplan.FieldErrorf("name", "must be 1 to 200 characters without surrounding spaces")
	case !validProviderName(n.Provider):
		return onceplan.FieldErrorf("provider", "%q is not a provider name (lowercase letters, digits, - and _)", n.Provider)
	case n.RequiredApprovals < 1 || n.RequiredApprovals > 10:
		return onceplan.FieldErrorf("required_approvals", "must be between 1 and 10")
	case n.CreatedBy == 0:
		return onceplan.FieldErrorf("created_by", "is required")
	}
	// The payload is checked here and not only at submit: a draft that
	// cannot render (a template syntax error, a subject with a line break,
	// a body over the limit) is refused when it is written, as the UI's
	// form already refuses it, so every door stores only what can be sent.
	return n.Payload.Validate()
}

func validProviderName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (i > 0 && (r == '-' || r == '_'))
		if !ok {
			return false
		}
	}
	return true
}

const campaignCols = `id, name, provider, tool, scheduled_at, start_on_approval, required_approvals, list_unsubscribe,
	state, version, coalesce(plan_id, 0), created_by, created_by_agent, created_at, updated_at,
	(SELECT a.archived_at FROM campaign_archive a WHERE a.campaign_id = campaign.id)`

func scanCampaign(row pgx.Row) (Campaign, error) {
	var c Campaign
	var state string
	err := row.Scan(&c.ID, &c.Name, &c.Provider, &c.Tool, &c.ScheduledAt, &c.StartOnApproval, &c.RequiredApprovals, &c.ListUnsubscribe,
		&state, &c.Version, &c.PlanID, &c.CreatedBy, &c.CreatedByAgent, &c.CreatedAt, &c.UpdatedAt, &c.ArchivedAt)
	c.State = State(state)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, onceplan.ErrNotFound
	}
	return c, err
}

// createCampaign inserts a campaign and its first draft (version 1):
// Service.Create's write.
func createCampaign(ctx context.Context, tx pgx.Tx, n newCampaign) (Campaign, error) {
	if err := n.Validate(); err != nil {
		return Campaign{}, err
	}
	c, err := scanCampaign(tx.QueryRow(ctx, `
		INSERT INTO campaign (name, provider, tool, scheduled_at, start_on_approval, required_approvals, created_by, created_by_agent,
		                      list_unsubscribe)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		RETURNING `+campaignCols,
		n.Name, n.Provider, n.Tool, n.ScheduledAt, n.StartOnApproval, n.RequiredApprovals, n.CreatedBy, n.ViaAgent,
		!n.Transactional))
	if err != nil {
		return c, err
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO draft (campaign_id, version, from_addr, subject, text_body, html_body, proposed_by, last_edited_by)
		VALUES ($1, 1, $2, $3, $4, $5, $6, $6)`,
		c.ID, n.Payload.From, n.Payload.Subject, n.Payload.Text, n.Payload.HTML, n.CreatedBy)
	return c, err
}

// GetCampaign reads a campaign; onceplan.ErrNotFound when there is none (or the id
// is not a campaign id at all).
func GetCampaign(ctx context.Context, db onceplan.DB, id string) (Campaign, error) {
	if !validUUID(id) {
		return Campaign{}, onceplan.ErrNotFound
	}
	return scanCampaign(db.QueryRow(ctx, `SELECT `+campaignCols+` FROM campaign WHERE id = $1`, id))
}

// lockCampaign reads a campaign and locks its row until tx ends
// (Service.locked).
func lockCampaign(ctx context.Context, tx pgx.Tx, id string) (Campaign, error) {
	if !validUUID(id) {
		return Campaign{}, onceplan.ErrNotFound
	}
	return scanCampaign(tx.QueryRow(ctx, `SELECT `+campaignCols+` FROM campaign WHERE id = $1 FOR UPDATE`, id))
}

// ListCampaigns lists campaigns, most recently changed first.
func ListCampaigns(ctx context.Context, db onceplan.DB, limit int) ([]Campaign, error) {
	rows, err := db.Query(ctx, `SELECT `+campaignCols+` FROM campaign ORDER BY updated_at DESC, id LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Campaign, error) { return scanCampaign(r) })
}

// setState moves a campaign to another state: Service.shift's write, once
// the lifecycle table allowed the edge (PostgreSQL refuses an illegal edge
// anyway).
func setState(ctx context.Context, tx pgx.Tx, id string, to State) error {
	_, err := tx.Exec(ctx, `UPDATE campaign SET state = $2 WHERE id = $1`, id, string(to))
	return campaignRuleErr(err)
}

// campaignRuleErr words PostgreSQL's refusal of a change to a campaign's
// row (SQLSTATE OP002: an illegal transition, or a change to an archived
// campaign, migrations 0014 and 0034) as a conflict. The service checks
// the lifecycle before it writes, so this is the database's backstop
// speaking: a change committed meanwhile, such as an archive.
func campaignRuleErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "OP002" {
		return fmt.Errorf("%w: %s", onceplan.ErrConflict, pgErr.Message)
	}
	return err
}

// Draft is a campaign's editable version.
type Draft struct {
	CampaignID   string       `json:"campaign_id"`
	Version      int          `json:"version"`
	Payload      plan.Payload `json:"payload"`
	ListID       int64        `json:"-"`
	TargetCount  int          `json:"target_count"`
	ListDigest   string       `json:"-"`
	ProposedBy   int64        `json:"proposed_by"`
	LastEditedBy int64        `json:"last_edited_by"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
}

// GetDraft reads a draft version with its list's size and digest (the
// plan's, through its target_list_summary, migration 0030).
func GetDraft(ctx context.Context, db onceplan.DB, campaignID string, version int) (Draft, error) {
	var d Draft
	if !validUUID(campaignID) {
		return d, onceplan.ErrNotFound
	}
	err := db.QueryRow(ctx, `
		SELECT d.campaign_id, d.version, d.from_addr, d.subject, d.text_body, d.html_body,
		       coalesce(d.list_id, 0), coalesce(l.target_count, 0), coalesce(l.digest, ''),
		       d.proposed_by, d.last_edited_by, d.created_at, d.updated_at
		FROM draft d LEFT JOIN target_list_summary() l ON l.id = d.list_id
		WHERE d.campaign_id = $1 AND d.version = $2`, campaignID, version).Scan(
		&d.CampaignID, &d.Version, &d.Payload.From, &d.Payload.Subject, &d.Payload.Text, &d.Payload.HTML,
		&d.ListID, &d.TargetCount, &d.ListDigest, &d.ProposedBy, &d.LastEditedBy, &d.CreatedAt, &d.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("%w: campaign %s has no draft version %d", onceplan.ErrNotFound, campaignID, version)
	}
	return d, err
}

// Content is what the draft will do: its payload over its list.
func (d Draft) Content() plan.Content {
	return plan.Content{Payload: d.Payload, ListID: d.ListID, TargetCount: d.TargetCount}
}

// Hash is the draft's plan hash: what an approver of this draft approves.
func (d Draft) Hash(c Campaign) string {
	digest := d.ListDigest
	if digest == "" {
		digest = plan.NewListDigest().Sum()
	}
	return plan.PlanHash(plan.PlanHashInput{Payload: d.Payload, Provider: c.Provider, Tool: c.Tool, TargetCount: d.TargetCount, ListDigest: digest,
		Transactional: !c.ListUnsubscribe})
}

// updatePayload replaces a draft's payload, once it validates (see
// Payload.Validate).
func updatePayload(ctx context.Context, tx pgx.Tx, campaignID string, version int, p plan.Payload, editor int64) error {
	if err := p.Validate(); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `
		UPDATE draft SET from_addr = $3, subject = $4, text_body = $5, html_body = $6, last_edited_by = $7, updated_at = now()
		WHERE campaign_id = $1 AND version = $2`, campaignID, version, p.From, p.Subject, p.Text, p.HTML, editor)
	if err == nil && tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: campaign %s has no draft version %d", onceplan.ErrNotFound, campaignID, version)
	}
	return err
}

// newVersion starts draft version+1 as a copy of version (payload and
// list: lists are immutable, so sharing one is safe), proposed by editor.
func newVersion(ctx context.Context, tx pgx.Tx, campaignID string, version int, editor int64) (int, error) {
	next := version + 1
	_, err := tx.Exec(ctx, `
		INSERT INTO draft (campaign_id, version, from_addr, subject, text_body, html_body, list_id, proposed_by, last_edited_by)
		SELECT campaign_id, $3, from_addr, subject, text_body, html_body, list_id, $4, $4
		FROM draft WHERE campaign_id = $1 AND version = $2`, campaignID, version, next, editor)
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `UPDATE campaign SET version = $2 WHERE id = $1`, campaignID, next)
	return next, campaignRuleErr(err)
}

func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
				return false
			}
		}
	}
	return true
}

// AnyCampaign reports whether any campaign exists.
func AnyCampaign(ctx context.Context, db onceplan.DB) (bool, error) {
	var exists bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM campaign)`).Scan(&exists)
	return exists, err
}

// CampaignTool is a campaign's id and the tool its effects are keyed by.
type CampaignTool struct {
	ID   string
	Tool string
}

// CampaignTools lists every campaign's id and tool.
func CampaignTools(ctx context.Context, db onceplan.DB) ([]CampaignTool, error) {
	rows, err := db.Query(ctx, `SELECT id::text, tool FROM campaign`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (CampaignTool, error) {
		var c CampaignTool
		err := r.Scan(&c.ID, &c.Tool)
		return c, err
	})
}

// Live lists, by id, the campaigns with a plan that run or are paused,
// and those completed within the last completedWithin (whose last
// messages may still be owed).
func Live(ctx context.Context, db onceplan.DB, completedWithin time.Duration) ([]string, error) {
	rows, err := db.Query(ctx, `
		SELECT c.id FROM campaign c
		WHERE c.plan_id IS NOT NULL
		  AND (c.state IN ('running', 'paused')
		       OR (c.state = 'completed' AND EXISTS (SELECT 1 FROM campaign_event e
		            WHERE e.campaign_id = c.id AND e.action = 'complete' AND e.created_at > now() - $1::interval)))
		ORDER BY c.id`, completedWithin.String())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// RunningProviders lists the providers the running campaigns send
// through, each once.
func RunningProviders(ctx context.Context, db onceplan.DB) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT provider FROM campaign WHERE state = $1`, string(StateRunning))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Running lists the running campaigns by id.
func Running(ctx context.Context, db onceplan.DB) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT id FROM campaign WHERE state = $1`, string(StateRunning))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Names maps each of the campaigns ids names to its name; an unknown id
// is absent.
func Names(ctx context.Context, db onceplan.DB, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT id::text, name FROM campaign WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	var id, name string
	_, err = pgx.ForEachRow(rows, []any{&id, &name}, func() error {
		out[id] = name
		return nil
	})
	return out, err
}
