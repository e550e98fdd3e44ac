// Package riverdb is the SQL Onceplan runs on River's own tables
// (river_job, river_queue), in one place: the UI and /metrics read the
// queues' states (the claim's gate asks the database's
// onceplan_paused_queue, migration 0027). River
// owns these tables and may change them in a release; when it does, this
// package (with package jobs, River's adapter, and that function) is what
// changes, not the executor, the web UI or the metrics.
//
// It imports no other Onceplan package, so that any of them may use it.
package riverdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// ResumeQueueKind is the kind of the job that resumes a queue paused
// until a time (package jobs inserts it when a provider answers "over
// quota").
const ResumeQueueKind = "onceplan_resume_queue"

// QueueState is one River queue as Onceplan shows it.
type QueueState struct {
	Paused bool
	// PausedUntil is when the pause ends, when a resume is to come: the
	// latest of the queue's resume jobs still to run (an earlier one
	// leaves the queue paused for the later).
	PausedUntil time.Time
	// Jobs by state: waiting to run, scheduled for later, running, and
	// waiting to be retried.
	Available, Scheduled, Running, Retryable int
}

// QueueStates reads every queue River knows and every queue with jobs
// waiting, running or retrying: paused or not, until when, and its jobs by
// state. Read only.
func QueueStates(ctx context.Context, db onceplan.DB) (map[string]QueueState, error) {
	out := map[string]QueueState{}
	rows, err := db.Query(ctx, `
		SELECT q.name, q.paused_at IS NOT NULL,
		       (SELECT max(coalesce((j.args ->> 'until')::timestamptz, j.scheduled_at)) FROM river_job j
		        WHERE j.kind = $1 AND j.args ->> 'queue' = q.name
		          AND j.state IN ('scheduled', 'available', 'retryable', 'running'))
		FROM river_queue q`, ResumeQueueKind)
	if err != nil {
		return nil, err
	}
	var (
		name   string
		paused bool
		until  *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &paused, &until}, func() error {
		st := out[name]
		st.Paused = paused
		if until != nil && paused {
			st.PausedUntil = *until
		}
		out[name] = st
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, `
		SELECT queue, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'running', 'retryable') GROUP BY queue, state`)
	if err != nil {
		return nil, err
	}
	var (
		state string
		n     int
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &state, &n}, func() error {
		st := out[name]
		switch state {
		case "available":
			st.Available = n
		case "scheduled":
			st.Scheduled = n
		case "running":
			st.Running = n
		case "retryable":
			st.Retryable = n
		}
		out[name] = st
		return nil
	})
	return out, err
}
