package toolcall

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/ledger"
)

// Row is one single effect in a list: its identity and where its latest
// attempt stands (the summary of Status).
type Row struct {
	Key          ledger.Key
	Tool         string
	Event        string
	Target       ledger.Target
	State        State
	Attempt      int
	LeaseUntil   time.Time
	LeaseExpired bool
	Holder       string
	Receipt      string
	Reason       string
	Recovery     Recovery
	UpdatedAt    time.Time
}

// ListFilter selects single effects: by tool, by event id, by state (each
// "" for any), newest change first, up to Limit (default 100).
type ListFilter struct {
	Tool, Event string
	State       State
	Limit       int
}

// List reads the single effects a may read (Reader.Call), by the same
// FROM as Status.
func (s *Service) List(ctx context.Context, a auth.Actor, f ListFilter) ([]Row, error) {
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 100
	}
	rows, err := s.pool.Query(ctx, `
		SELECT c.key, c.tool, c.event, c.identity, coalesce(x.state::text, ''), coalesce(x.attempt, 0),
		       a.lease_until, coalesce(a.lease_until < now(), false), coalesce(a.holder, ''),
		       coalesce(x.receipt, ''), coalesce(x.reason, ''), coalesce(p.recovery, ''), coalesce(x.updated_at, c.created_at)`+
		latestAttemptFrom+`
		LEFT JOIN tool_policy p ON p.id = a.policy_id
		WHERE ($1 = '' OR c.tool = $1) AND ($2 = '' OR c.event = $2) AND ($3 = '' OR coalesce(x.state::text, '') = $3)
		  AND `+callReadable("c.created_by_user", 5)+`
		ORDER BY coalesce(x.updated_at, c.created_at) DESC, c.key LIMIT $4`,
		append([]any{f.Tool, f.Event, string(f.State), f.Limit}, ReaderOf(a).callArgs()...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var row Row
		var key, canonical, state, rec string
		var lease *time.Time
		err := r.Scan(&key, &row.Tool, &row.Event, &canonical, &state, &row.Attempt, &lease, &row.LeaseExpired, &row.Holder,
			&row.Receipt, &row.Reason, &rec, &row.UpdatedAt)
		if err != nil {
			return row, err
		}
		row.Key, row.State, row.Recovery = ledger.Key(key), State(state), Recovery(rec)
		if lease != nil {
			row.LeaseUntil = *lease
		}
		st := Status{Key: row.Key}
		if err := st.setIdentity(canonical); err != nil {
			return row, err
		}
		row.Target = st.Target
		return row, nil
	})
}

// Count is how many single effects of a tool (and event, when counted
// per event) stand in a state.
type Count struct {
	Tool  string
	Event string
	State State
	N     int
}

// Counts counts the single effects a may read per tool and state — and
// per event too when perEvent — of tool and event ("" for any): the audit
// per tool and event. Calls awaiting a person's approval count as
// StateAwaitingApproval (one per key, of the requests a may read: they
// are what an approver decides on), beside the states of the ledger (of
// the calls a may read).
func (s *Service) Counts(ctx context.Context, a auth.Actor, tool, event string, perEvent bool) ([]Count, error) {
	eventCol := "''"
	if perEvent {
		eventCol = "event"
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`
		SELECT tool, %[1]s, state, count(*) FROM (
			SELECT c.tool, c.event, coalesce(x.state::text, '') AS state`+latestAttemptFrom+`
			WHERE ($1 = '' OR c.tool = $1) AND ($2 = '' OR c.event = $2) AND `+callReadable("c.created_by_user", 3)+`
			UNION ALL
			SELECT w.tool, w.event, 'awaiting_approval' FROM (
				SELECT DISTINCT r.key, r.tool, r.event FROM tool_approval_request r
				WHERE ($1 = '' OR r.tool = $1) AND ($2 = '' OR r.event = $2)
				  AND NOT EXISTS (SELECT 1 FROM tool_approval d WHERE d.request_id = r.id)
				  AND NOT EXISTS (SELECT 1 FROM tool_call k WHERE k.key = r.key)
				  AND `+requestReadable("r.requested_by_user", 3)+`) w
		) t GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, eventCol), append([]any{tool, event}, ReaderOf(a).requestArgs()...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Count, error) {
		var c Count
		var state string
		err := r.Scan(&c.Tool, &c.Event, &state, &c.N)
		c.State = State(state)
		return c, err
	})
}
