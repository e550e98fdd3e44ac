package ledger

import (
	"context"
	"errors"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Archived is what archiving one campaign moved out of the hot tables
// (docs/ARCHITECTURE.md, "The archive").
type Archived struct {
	Campaign string
	By       string
	// Attempts, Answers and Calls count the attempts, their raw-answer rows
	// and the batch calls that carried them; Bumps the recorded bumps of the
	// campaign's keys (migration 0035).
	Attempts int64
	Answers  int64
	Calls    int64
	Bumps    int64
	At       time.Time
}

// ArchiveCampaign moves campaign's attempts, their raw answers, their
// batch calls and its keys' bumps into the archive, in one transaction (archive_campaign,
// migration 0034): afterwards the claims and settles of other campaigns
// walk indexes without them, while every read of the ledger's history
// (effect_attempt(), Get, History, Responses, the audit) still finds
// them; the attempts outside any plan on the campaign's keys go with them
// (migration 0038). PostgreSQL refuses a campaign that is not completed or
// cancelled, that has an attempt pending or unknown, or that is completed
// with a target the ledger shows nothing final for (never tried, to be
// sent again, bumped since: target_open), and keeps an archived campaign
// from ever running again.
func (s *Store) ArchiveCampaign(ctx context.Context, campaign, actor string) (Archived, error) {
	a := Archived{Campaign: campaign}
	// In a transaction of its own: a caller that stops before the commit
	// (killed, its connection gone) leaves every row where it was. At READ
	// COMMITTED, the only level PostgreSQL archives at (each of its checks
	// reads the rows committed before it), whatever the session's default;
	// inside a caller's transaction, that transaction's level decides.
	archive := func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT archived_by, attempts, answers, calls, bumps, archived_at FROM archive_campaign($1::uuid, $2)`,
			campaign, actor).Scan(&a.By, &a.Attempts, &a.Answers, &a.Calls, &a.Bumps, &a.At)
	}
	var err error
	if b, ok := s.db.(txBeginner); ok {
		err = pgx.BeginTxFunc(ctx, b, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, archive)
	} else {
		err = pgx.BeginFunc(ctx, s.db, archive)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "OP002" {
		return a, &NotArchivedError{Reason: campaignPrefix.ReplaceAllString(pgErr.Message, "")}
	}
	return a, translate(err)
}

// txBeginner is a pool or a connection: it begins a transaction with
// options.
type txBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// NotArchivedError is PostgreSQL's refusal to archive a campaign, and why
// (the campaign is not finished, it has attempts still open, ...).
type NotArchivedError struct{ Reason string }

func (e *NotArchivedError) Error() string { return "not archived: " + e.Reason }

// Unwrap makes a refusal an ErrIllegalTransition.
func (e *NotArchivedError) Unwrap() error { return ErrIllegalTransition }

// campaignPrefix is how archive_campaign's refusals start.
var campaignPrefix = regexp.MustCompile(`^campaign [0-9a-f-]{36}: `)
