package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// The ledger's writes, each one statement for any number of attempts
// (River's way: its one-job completer is the batch statement called with
// one element). The executor's group commits call them with whatever its
// workers asked for meanwhile; the one-row methods (Claim, RecordResponse,
// Settle) are the same statements with one element, so each rule is
// written once.

// ClaimRequest is one claim of a batch: the effect, and what a Gate may
// read besides — the campaign the plan target belongs to and the queue of
// its provider.
type ClaimRequest struct {
	ClaimParams
	Campaign string // "" outside a campaign
	Queue    string // "" when no queue is checked
}

// Won reports whether attempt e, inserted by a claim of several requests,
// is r's: the attempt at r's key that r's owner and job claimed.
func (r ClaimRequest) Won(e Effect) bool {
	return e.Key == r.Key && e.Owner == r.Owner && e.JobID == r.JobID
}

// Gate is what a claim checks in its own statement, so that a pause, a
// cancel or a suppression committed before the claim is always seen
// (check, then commit the pending row, as one step: docs/ARCHITECTURE.md,
// "The gate"). Its SQL
// reads a claim request r, whose columns are key, owner, job_id, plan_id,
// ordinal, campaign_id (uuid, NULL outside a campaign) and queue.
type Gate struct {
	// Open is the condition for claiming r at all: a request for which
	// it is false is not claimed (ClaimGateClosed). "" claims every
	// request.
	Open string
	// Suppressed is the SQL expression for the id of the suppression entry
	// that keeps r's plan target from being mailed now, NULL when none
	// (package suppression's rule, over the target's address). A plan
	// request it names whose key is free is not claimed: the same
	// statement records the target as suppressed for its plan
	// (target_suppressed, write-once), and a target recorded so is never
	// claimed for that plan again (ClaimSuppressed). "" checks nothing.
	Suppressed string
}

// suppressedInPlan is the SQL condition that the target the SQL
// expressions plan and ordinal name was recorded as suppressed for that
// plan (the claim's record in target_suppressed). Other packages ask the
// database's target_suppressed_in(plan), which takes the plan only: the
// claim names each request's plan, and so keeps the condition written out
// (TestSuppressedInPlanIsTheDatabases keeps the two equal).
func suppressedInPlan(plan, ordinal string) string {
	return `EXISTS (SELECT 1 FROM target_suppressed ts WHERE ts.plan_id = ` + plan + ` AND ts.ordinal = ` + ordinal + `)`
}

// claimSQL inserts a pending row for each request whose gate holds, at its
// key's current epoch, unless a blocking row is there or the target is
// suppressed (then it records that instead), and returns the rows it
// inserted. Requests are taken in key order: every batch of every process
// locks keys in the same order, so two never wait on each other.
func claimSQL(gate Gate) string {
	cond := "true"
	if gate.Open != "" {
		cond = gate.Open
	}
	suppressed, record, notSuppressed := "NULL::bigint", "", ""
	if gate.Suppressed != "" {
		suppressed = "CASE WHEN r.plan_id = 0 THEN NULL ELSE " + gate.Suppressed + " END"
		record = `, suppressed AS (
	INSERT INTO target_suppressed (plan_id, ordinal, key, suppression_id, job_id, owner)
	SELECT o.plan_id, o.ordinal, o.key, o.suppression_id, nullif(o.job_id, 0), o.owner
	FROM open o
	CROSS JOIN LATERAL effect_current_epoch(o.key) cur
	WHERE o.suppression_id IS NOT NULL
	  AND NOT EXISTS (SELECT 1 FROM effect b WHERE b.key = o.key AND b.epoch = cur.epoch AND b.state IN ` + blockingStates + `)
	ORDER BY o.plan_id, o.ordinal
	ON CONFLICT (plan_id, ordinal) DO NOTHING
)`
		notSuppressed = `
WHERE o.suppression_id IS NULL AND NOT ` + suppressedInPlan("o.plan_id", "o.ordinal")
	}
	return `
WITH req AS (
	SELECT r.key, r.owner, r.job_id, r.plan_id, r.ordinal, nullif(r.campaign_id, '')::uuid AS campaign_id, r.queue
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::int[], $6::text[], $7::text[])
		AS r(key, owner, job_id, plan_id, ordinal, campaign_id, queue)
), open AS (
	SELECT r.*, ` + suppressed + ` AS suppression_id FROM req r WHERE ` + cond + `
)` + record + `
INSERT INTO effect (key, epoch, attempt, owner, job_id, plan_id, ordinal)
SELECT o.key, cur.epoch,
       (SELECT count(*) + 1 FROM effect e WHERE e.key = o.key AND e.epoch = cur.epoch),
       o.owner, nullif(o.job_id, 0), nullif(o.plan_id, 0), CASE WHEN o.plan_id = 0 THEN NULL ELSE o.ordinal END
FROM open o
CROSS JOIN LATERAL effect_current_epoch(o.key) cur` + notSuppressed + `
ORDER BY o.key
ON CONFLICT (key, epoch) WHERE state IN ` + blockingStates + ` DO NOTHING
RETURNING ` + effectCols
}

// ClaimMany commits, in one statement, a pending row for each request
// whose gate holds and whose key is free at its current epoch, and
// returns the rows it inserted (at most one per key: the ledger's unique
// index decides between concurrent claims). A request it did not insert
// was gated out, found its key held, or its target suppressed: ClaimOne
// says which.
func (s *Store) ClaimMany(ctx context.Context, reqs []ClaimRequest, gate Gate) ([]Effect, error) {
	args, err := claimArgs(reqs)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, claimSQL(gate), args...)
	if err != nil {
		return nil, translate(err)
	}
	return collectEffects(rows)
}

// claimArgs are claimSQL's arguments for reqs, in key order (every batch of
// every process locks keys in the same order).
func claimArgs(reqs []ClaimRequest) ([]any, error) {
	for _, r := range reqs {
		if err := r.validate(); err != nil {
			return nil, err
		}
	}
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b ClaimRequest) int { return strings.Compare(string(a.Key), string(b.Key)) })
	n := len(reqs)
	keys, owners, campaigns, queues := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	jobs, plans, ordinals := make([]int64, n), make([]int64, n), make([]int32, n)
	for i, r := range reqs {
		keys[i], owners[i], campaigns[i], queues[i] = string(r.Key), r.Owner, r.Campaign, r.Queue
		jobs[i], plans[i], ordinals[i] = r.JobID, r.PlanID, int32(r.Ordinal)
	}
	return []any{keys, owners, jobs, plans, ordinals, campaigns, queues}, nil
}

func collectEffects(rows pgx.Rows) ([]Effect, error) {
	effs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) { return scanEffect(r) })
	return effs, translate(err)
}

func (p ClaimParams) validate() error {
	if _, err := ParseKey(string(p.Key)); err != nil {
		return err
	}
	if strings.TrimSpace(p.Owner) == "" {
		return fmt.Errorf("%w: a claim needs an owner", ErrMissingEvidence)
	}
	return nil
}

// ClaimOne claims one request through ClaimMany, and says what kept it
// out when it did not win: the row that holds the key, the target's
// suppression (ClaimSuppressed), or the gate (ClaimGateClosed). A
// blocking row may settle as failed between the insert and the look at
// it; then the key is free and it tries again. Bounded: each round needs
// another attempt to fail in between.
func (s *Store) ClaimOne(ctx context.Context, r ClaimRequest, gate Gate) (Claim, error) {
	for range 5 {
		won, err := s.ClaimMany(ctx, []ClaimRequest{r}, gate)
		if errors.Is(err, ErrGateClosed) && (gate.Open != "" || gate.Suppressed != "") {
			// The gate closed after the statement's snapshot, before
			// PostgreSQL's own check: the next statement's gate sees it.
			continue
		}
		if err != nil {
			return Claim{}, err
		}
		if len(won) == 1 {
			return Claim{Outcome: ClaimWon, Effect: won[0]}, nil
		}
		e, err := s.blocking(ctx, r.Key)
		switch {
		case err == nil:
			switch e.State {
			case StateDone:
				return Claim{Outcome: ClaimDone, Effect: e}, nil
			case StateStranded:
				return Claim{Outcome: ClaimStranded, Effect: e}, nil
			default:
				return Claim{Outcome: ClaimInDoubt, Effect: e}, nil
			}
		case !errors.Is(err, onceplan.ErrNotFound):
			return Claim{}, err
		}
		if gate.Open != "" {
			open, err := s.gateOpen(ctx, r, gate)
			if err != nil {
				return Claim{}, err
			}
			if !open {
				return Claim{Outcome: ClaimGateClosed}, nil
			}
		}
		if gate.Suppressed != "" && r.PlanID != 0 {
			var id int64
			err := s.db.QueryRow(ctx, `SELECT suppression_id FROM target_suppressed WHERE plan_id = $1 AND ordinal = $2`,
				r.PlanID, r.Ordinal).Scan(&id)
			switch {
			case err == nil:
				return Claim{Outcome: ClaimSuppressed, SuppressionID: id}, nil
			case !errors.Is(err, pgx.ErrNoRows):
				return Claim{}, translate(err)
			}
		}
	}
	return Claim{}, fmt.Errorf("%w: key %s keeps changing under the claim", onceplan.ErrConflict, r.Key)
}

// gateOpen evaluates the gate's Open condition for r on its own.
func (s *Store) gateOpen(ctx context.Context, r ClaimRequest, gate Gate) (bool, error) {
	var open bool
	err := s.db.QueryRow(ctx, `
		SELECT `+gate.Open+` FROM (SELECT $1::text AS key, $2::text AS owner, $3::bigint AS job_id, $4::bigint AS plan_id,
		       $5::int AS ordinal, nullif($6::text, '')::uuid AS campaign_id, $7::text AS queue) r`,
		string(r.Key), r.Owner, r.JobID, r.PlanID, r.Ordinal, r.Campaign, r.Queue).Scan(&open)
	return open, translate(err)
}

const recordResponsesSQL = `INSERT INTO effect_response (effect_id, kind, body)
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[]) ORDER BY 1`

// ResponseRecord is one raw provider answer to record.
type ResponseRecord struct {
	EffectID int64
	Kind     ResponseKind
	Body     []byte
}

// RecordResponses commits raw provider answers, exactly as received,
// before anything parses them (rule 3), in one statement.
func (s *Store) RecordResponses(ctx context.Context, recs []ResponseRecord) error {
	_, err := s.recordResponses(ctx, recs, "")
	return err
}

// recordResponses is RecordResponses, returning the rows' returning
// columns (RecordResponse wants its one id; the group commit nothing).
func (s *Store) recordResponses(ctx context.Context, recs []ResponseRecord, returning string) ([]int64, error) {
	ids, kinds, bodies := responseArrays(recs)
	if returning == "" {
		_, err := s.db.Exec(ctx, recordResponsesSQL, ids, kinds, bodies)
		return nil, translate(err)
	}
	rows, err := s.db.Query(ctx, recordResponsesSQL+" RETURNING "+returning, ids, kinds, bodies)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return out, translate(err)
}

// responseArrays are recordResponsesSQL's arguments for recs.
func responseArrays(recs []ResponseRecord) (ids []int64, kinds []string, bodies [][]byte) {
	n := len(recs)
	ids, kinds, bodies = make([]int64, n), make([]string, n), make([][]byte, n)
	for i, r := range recs {
		ids[i], kinds[i], bodies[i] = r.EffectID, string(r.Kind), r.Body
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
	}
	return ids, kinds, bodies
}

func (p SettleParams) validate() error {
	switch p.State {
	case StateFailed:
		switch p.Failure {
		case "", FailureRejected, FailureRetry, FailureExhausted, FailureQuota, FailureUnsent, FailureUnreached:
			return nil
		}
		return fmt.Errorf("%w: a failure is %q, %q, %q, %q, %q or %q, not %q", ErrMissingEvidence,
			FailureRejected, FailureRetry, FailureExhausted, FailureQuota, FailureUnsent, FailureUnreached, p.Failure)
	case StateDone, StateUnknown, StateStranded:
		if p.Failure != "" {
			return fmt.Errorf("%w: only a failed attempt says whether it is final", ErrMissingEvidence)
		}
		return nil
	}
	return fmt.Errorf("%w: an attempt settles as done, failed, unknown or stranded, not %q", ErrIllegalTransition, p.State)
}

// failure is the failure column's value for p: NULL unless failed.
func (p SettleParams) failure() string {
	if p.State != StateFailed {
		return ""
	}
	return string(cmp.Or(p.Failure, FailureRetry))
}

// settleSQL settles rows by id and returns the columns returning names
// (the group commit needs only the ids; Settle, the whole row). "f.id =
// ANY($1)" repeats the join as a condition on effect's primary key, so the
// plan probes the index rather than joining by scanning the whole table.
func settleSQL(returning string) string {
	return `
UPDATE effect f SET state = u.new_state::effect_state, receipt = nullif(u.new_receipt, ''), reason = nullif(u.new_reason, ''),
       failure = nullif(u.new_failure, '')
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(effect_id, new_state, new_receipt, new_reason, new_failure)
WHERE f.id = u.effect_id AND f.id = ANY($1::bigint[])
RETURNING ` + returning
}

// SettleMany moves pending attempts to their outcomes in one statement
// (done, failed and stranded are refused by PostgreSQL unless a raw
// answer was recorded first) and returns the ids it settled. Any refusal
// fails the whole statement: the caller settles one at a time to learn
// which.
func (s *Store) SettleMany(ctx context.Context, ps []SettleParams) ([]int64, error) {
	rows, err := s.settle(ctx, ps, "f.id")
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, translate(err)
}

func (s *Store) settle(ctx context.Context, ps []SettleParams, returning string) (pgx.Rows, error) {
	ids, states, receipts, reasons, failures, err := settleArrays(ps)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, settleSQL(returning), ids, states, receipts, reasons, failures)
	return rows, translate(err)
}

// settleArrays are settleSQL's arguments for ps, in effect id order (every
// batch of every process locks rows in the same order).
func settleArrays(ps []SettleParams) (ids []int64, states, receipts, reasons, failures []string, err error) {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b SettleParams) int { return cmp.Compare(a.EffectID, b.EffectID) })
	n := len(ps)
	ids, states, receipts, reasons, failures = make([]int64, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, p := range ps {
		if err := p.validate(); err != nil {
			return nil, nil, nil, nil, nil, err
		}
		ids[i], states[i], receipts[i], reasons[i], failures[i] = p.EffectID, string(p.State), p.Receipt, p.Reason, p.failure()
	}
	return ids, states, receipts, reasons, failures, nil
}

// Answer is a raw provider answer to record and, when Settle is set, the
// verdict it gave, to commit with it (an attempt's raw answer and its settle
// share one commit: docs/ARCHITECTURE.md, "Group commit"). The caller
// classifies the answer before it asks; a classification that fails or
// panics must still give an Answer, whose Settle leaves the row unknown or
// stranded for a person, so the raw bytes are committed whatever
// classification does.
type Answer struct {
	ResponseRecord
	Settle *SettleParams
}

// batchSender is a onceplan.DB that runs statements in one round trip and, outside
// a transaction, in one implicit transaction (a pool, a connection, a
// transaction).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// AnswerMany commits raw answers and the settles given with them in one
// transaction (one round trip: the answers' insert, then the settles'
// update, so PostgreSQL's rule "done, failed and stranded only after a raw
// answer" sees the answer), and the claims given with them after that
// (docs/ARCHITECTURE.md, "A job of several targets": a target's settle
// and the next target's claim may share a
// transaction; a claim then sees a settle of the same batch that freed its
// key). It returns the ids settled and the attempts claimed. Any refusal
// rolls back all of it, raw answers included: the caller then records and
// settles one at a time, answers first, and claims one at a time, to
// learn which.
func (s *Store) AnswerMany(ctx context.Context, answers []Answer, claims []ClaimRequest, gate Gate) (settled []int64, won []Effect, err error) {
	b := &pgx.Batch{}
	var ps []SettleParams
	if len(answers) > 0 {
		recs := make([]ResponseRecord, len(answers))
		for i, a := range answers {
			recs[i] = a.ResponseRecord
			if a.Settle != nil {
				ps = append(ps, *a.Settle)
			}
		}
		ids, kinds, bodies := responseArrays(recs)
		b.Queue(recordResponsesSQL, ids, kinds, bodies)
	}
	if len(ps) > 0 {
		sids, states, receipts, reasons, failures, err := settleArrays(ps)
		if err != nil {
			return nil, nil, err
		}
		b.Queue(settleSQL("f.id"), sids, states, receipts, reasons, failures)
	}
	if len(claims) > 0 {
		args, err := claimArgs(claims)
		if err != nil {
			return nil, nil, err
		}
		b.Queue(claimSQL(gate), args...)
	}
	if b.Len() == 0 {
		return nil, nil, nil
	}
	sender, ok := s.db.(batchSender)
	if !ok {
		return nil, nil, fmt.Errorf("ledger: AnswerMany needs a pool or a transaction (%T sends no batches)", s.db)
	}
	br := sender.SendBatch(ctx, b)
	defer br.Close()
	if len(answers) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, translate(err)
		}
	}
	if len(ps) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, translate(err)
		}
		if settled, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return nil, nil, translate(err)
		}
	}
	if len(claims) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, translate(err)
		}
		if won, err = collectEffects(rows); err != nil {
			return nil, nil, err
		}
	}
	return settled, won, translate(br.Close())
}

// BatchStatement is one of the ledger's batch statements, for tests that
// check the plans PostgreSQL makes for them.
type BatchStatement struct {
	Name, SQL string
	// EmptyArgs is an EXECUTE argument list with empty arrays.
	EmptyArgs string
}

// BatchStatements are the claim (with gate), the raw answers and the
// settle, as ClaimMany, RecordResponses and SettleMany run them.
func BatchStatements(gate Gate) []BatchStatement {
	return []BatchStatement{
		{"claim", claimSQL(gate), "('{}', '{}', '{}', '{}', '{}', '{}', '{}')"},
		{"response", recordResponsesSQL, "('{}', '{}', '{}')"},
		{"settle", settleSQL("f.id"), "('{}', '{}', '{}', '{}', '{}')"},
	}
}
