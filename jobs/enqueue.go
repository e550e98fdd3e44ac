package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/plan"
)

// Enqueuer inserts a plan's jobs.
type Enqueuer struct {
	client *river.Client[pgx.Tx]
	// BatchSize bounds one InsertManyFastTx call (and the rows read per
	// round trip); a million-target plan goes in 100 batches.
	BatchSize int
}

// NewEnqueuer returns an Enqueuer on a River client (an insert-only client
// is enough).
func NewEnqueuer(client *river.Client[pgx.Tx]) *Enqueuer {
	return &Enqueuer{client: client, BatchSize: 10_000}
}

// EnqueueRemaining inserts, inside tx, one job for every target of p that
// has no blocking ledger row at its current epoch and no live job of p:
// targets already done (for instance under an earlier version of the
// campaign) get no job, and pressing resume twice enqueues nothing the
// second time. It returns how many jobs it inserted. The ledger decides
// every effect regardless; this only keeps the queue free of no-op jobs.
func (e *Enqueuer) EnqueueRemaining(ctx context.Context, tx pgx.Tx, p plan.Plan) (int, error) {
	total, after := 0, 0
	params := make([]river.InsertManyParams, 0, e.BatchSize)
	for {
		rows, err := tx.Query(ctx, `
			SELECT t.ordinal, t.key FROM target t
			WHERE t.list_id = $1 AND t.ordinal > $2
			  AND NOT EXISTS (
			    SELECT 1 FROM effect f
			    WHERE f.key = t.key AND f.state IN ('pending', 'done', 'unknown', 'stranded')
			      AND f.epoch = (SELECT coalesce(max(b.epoch), 0) FROM effect_bump b WHERE b.key = t.key))
			  AND NOT EXISTS (
			    SELECT 1 FROM river_job j
			    WHERE j.kind = 'onceplan_effect' AND j.args ->> 'key' = t.key
			      AND (j.args ->> 'plan_id')::bigint = $4
			      AND j.state NOT IN ('completed', 'cancelled', 'discarded'))
			ORDER BY t.ordinal LIMIT $3`, p.ListID, after, e.BatchSize, p.ID)
		if err != nil {
			return total, err
		}
		params = params[:0]
		var (
			ordinal int
			key     string
		)
		_, err = pgx.ForEachRow(rows, []any{&ordinal, &key}, func() error {
			params = append(params, river.InsertManyParams{Args: EffectArgs{
				CampaignID: p.CampaignID, PlanID: p.ID, Ordinal: ordinal, Key: key, Provider: p.Provider,
			}})
			after = ordinal
			return nil
		})
		if err != nil {
			return total, err
		}
		if len(params) == 0 {
			return total, nil
		}
		n, err := e.client.InsertManyFastTx(ctx, tx, params)
		if err != nil {
			return total, fmt.Errorf("enqueueing plan %d: %w", p.ID, err)
		}
		total += n
		if len(params) < e.BatchSize {
			return total, nil
		}
	}
}
