package ledger

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// InDoubt is what is in doubt in the ledger now: attempts pending (their
// outcome not yet recorded) and unknown (for a person), and how long the
// oldest pending one has waited.
type InDoubt struct {
	Pending, Unknown int64
	// OldestPending is the oldest pending attempt's age; 0 when none is.
	OldestPending time.Duration
}

// InDoubtNow reads what is in doubt now (for /metrics).
func InDoubtNow(ctx context.Context, db onceplan.DB) (InDoubt, error) {
	var d InDoubt
	var oldest *float64
	err := db.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM effect WHERE state = 'pending'),
		       (SELECT count(*) FROM effect WHERE state = 'unknown'),
		       (SELECT extract(epoch FROM now() - min(created_at)) FROM effect WHERE state = 'pending')`).
		Scan(&d.Pending, &d.Unknown, &oldest)
	if oldest != nil {
		d.OldestPending = time.Duration(*oldest * float64(time.Second))
	}
	return d, err
}

// StateCount is how many attempts of one plan are in one state; PlanID 0
// counts the attempts of no plan (single agent effects).
type StateCount struct {
	PlanID int64
	State  State
	N      int64
}

// CountByPlan counts every attempt by its plan and state (for /metrics).
func CountByPlan(ctx context.Context, db onceplan.DB) ([]StateCount, error) {
	rows, err := db.Query(ctx, `SELECT coalesce(plan_id, 0), state::text, count(*) FROM effect GROUP BY 1, 2`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateCount, error) {
		var c StateCount
		err := r.Scan(&c.PlanID, &c.State, &c.N)
		return c, err
	})
}
