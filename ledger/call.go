package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Batch calls (docs/ARCHITECTURE.md, "Batch sending"): one provider call
// carrying several attempts, each still its own row and key. The call's
// composition — which attempts, in which order, and the exact request —
// commits with their claims (ClaimCall), so that a recovery sends the same
// bytes again under the same key, or asks about each attempt by its own
// effect id; its one raw answer commits, as received, with each attempt's
// settle (AnswerCall). PostgreSQL refuses a call that carries an attempt of
// another transaction (one that may have been sent already), an attempt in
// two calls (migration 0033), an attempt of another plan than the call's,
// a provider that is not its plan's, an attempt added by another
// transaction than the call's, a call with fewer or more attempts than its
// size, and a send or resend answer of its own for an attempt a call
// carried (migration 0036). The stored request and key stay records:
// recovery derives them again before it sends a call again.

// Call is a batch call as stored.
type Call struct {
	ID       int64
	Provider string
	// PlanID is the plan whose targets it carries (0 for a call stored
	// before migration 0036).
	PlanID int64
	// Key is the service's idempotency key for the call ("" when it takes
	// none).
	Key string
	// Request is the exact request body.
	Request   []byte
	CreatedAt time.Time
	// Members are the attempts it carries, by position.
	Members []int64
}

// Compose builds the request of a call for the attempts a ClaimCall won, in
// the order of its requests: the service's key for the call and the exact
// bytes. An error rolls the claims back.
type Compose func(won []Effect) (key string, request []byte, err error)

// ClaimCall claims reqs in one statement, as ClaimMany does (each request
// gated, suppressed targets recorded), and, in the same commit, stores the
// call that carries the attempts it won: compose turns them (in reqs'
// order) into the request, which is stored with its members in that order.
// Every request is a target of one plan, sent through provider, that
// plan's. It returns the call (ID 0 and no members when nothing was won;
// compose is then not called) and the attempts won, in reqs' order. A
// request not won takes the one-row path (ClaimOne), which says why.
func (s *Store) ClaimCall(ctx context.Context, provider string, reqs []ClaimRequest, gate Gate, compose Compose) (Call, []Effect, error) {
	planID, err := planOfCall(reqs)
	if err != nil {
		return Call{}, nil, err
	}
	args, err := claimArgs(reqs)
	if err != nil {
		return Call{}, nil, err
	}
	var call Call
	var won []Effect
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimSQL(gate), args...)
		if err != nil {
			return translate(err)
		}
		effs, err := collectEffects(rows)
		if err != nil {
			return err
		}
		won = inOrder(reqs, effs)
		if len(won) == 0 {
			return nil
		}
		key, body, err := compose(won)
		if err != nil {
			return err
		}
		call = Call{Provider: provider, PlanID: planID, Key: key, Request: body, Members: make([]int64, len(won))}
		for i, e := range won {
			call.Members[i] = e.ID
		}
		if err := tx.QueryRow(ctx, `INSERT INTO effect_batch (provider, plan_id, call_key, request, size) VALUES ($1, $2, $3, $4, $5) RETURNING id, created_at`,
			provider, planID, key, body, len(won)).Scan(&call.ID, &call.CreatedAt); err != nil {
			return translate(err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO effect_batch_member (batch_id, position, effect_id)
			SELECT $1, m.position - 1, m.effect_id FROM unnest($2::bigint[]) WITH ORDINALITY AS m(effect_id, position)`,
			call.ID, call.Members)
		return translate(err)
	})
	if err != nil {
		return Call{}, nil, err
	}
	return call, won, nil
}

// planOfCall is the plan whose targets reqs are: a call carries one plan's
// targets (migration 0036 refuses any other).
func planOfCall(reqs []ClaimRequest) (int64, error) {
	if len(reqs) == 0 {
		return 0, fmt.Errorf("a batch call carries at least one target: %w", onceplan.ErrInvalid)
	}
	p := reqs[0].PlanID
	for _, r := range reqs {
		if r.PlanID == 0 || r.PlanID != p {
			return 0, fmt.Errorf("a batch call carries targets of one plan, not of plans %d and %d: %w", p, r.PlanID, onceplan.ErrInvalid)
		}
	}
	return p, nil
}

// inOrder is the attempts effs that reqs won (their key, owner and job), in
// reqs' order.
func inOrder(reqs []ClaimRequest, effs []Effect) []Effect {
	byKey := make(map[Key]Effect, len(effs))
	for _, e := range effs {
		byKey[e.Key] = e
	}
	var out []Effect
	for _, r := range reqs {
		if e, ok := byKey[r.Key]; ok && r.Won(e) {
			out = append(out, e)
			delete(byKey, r.Key)
		}
	}
	return out
}

// CallOf returns the batch call that carried attempt effectID and the
// attempt's position in it; onceplan.ErrNotFound when no call did.
func (s *Store) CallOf(ctx context.Context, effectID int64) (Call, int, error) {
	var call Call
	var pos int
	err := s.db.QueryRow(ctx, `
		SELECT b.id, b.provider, coalesce(b.plan_id, 0), b.call_key, b.request, b.created_at, m.position,
		       (SELECT array_agg(a.effect_id ORDER BY a.position) FROM effect_batch_member a WHERE a.batch_id = b.id)
		FROM effect_batch_member m JOIN effect_batch b ON b.id = m.batch_id
		WHERE m.effect_id = $1`, effectID).Scan(&call.ID, &call.Provider, &call.PlanID, &call.Key, &call.Request, &call.CreatedAt, &pos, &call.Members)
	if errors.Is(err, pgx.ErrNoRows) {
		return Call{}, 0, fmt.Errorf("effect %d was not sent in a batch call: %w", effectID, onceplan.ErrNotFound)
	}
	return call, pos, translate(err)
}

// CallAnswer is a batch call's recorded raw answer.
type CallAnswer struct {
	Kind ResponseKind
	Body []byte
}

// CallAnswers returns the raw answers recorded for batch call id, oldest
// first.
func (s *Store) CallAnswers(ctx context.Context, id int64) ([]CallAnswer, error) {
	rows, err := s.db.Query(ctx, `SELECT kind, body FROM effect_batch_response WHERE batch_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CallAnswer, error) {
		var a CallAnswer
		var kind string
		err := r.Scan(&kind, &a.Body)
		a.Kind = ResponseKind(kind)
		return a, err
	})
	return out, translate(err)
}

// Members returns the attempts of call c, by position, as they are now.
func (s *Store) Members(ctx context.Context, c Call) ([]Effect, error) {
	rows, err := s.db.Query(ctx, `SELECT `+effectCols+` FROM effect WHERE id = ANY($1)`, c.Members)
	if err != nil {
		return nil, translate(err)
	}
	effs, err := collectEffects(rows)
	if err != nil {
		return nil, err
	}
	pos := make(map[int64]int, len(c.Members))
	for i, id := range c.Members {
		pos[id] = i
	}
	slices.SortFunc(effs, func(a, b Effect) int { return pos[a.ID] - pos[b.ID] })
	return effs, nil
}

// AnswerCall commits a batch call's raw answer, exactly as received, for
// the attempts it names (each gets a raw-answer row that points at it),
// and the settles given with it, in one transaction: the answer first, so
// that PostgreSQL's rule "done, failed and stranded only after a raw
// answer" sees it. It returns the ids settled. When the settles are
// refused (one was settled meanwhile by another recovery), the answer is
// committed on its own and each settle is tried alone; a settle of an
// attempt no longer pending is then skipped, not an error.
func (s *Store) AnswerCall(ctx context.Context, call int64, kind ResponseKind, body []byte, attempts []int64, settles []SettleParams) ([]int64, error) {
	if body == nil {
		body = []byte{}
	}
	record := func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO effect_batch_response (batch_id, kind, body) VALUES ($1, $2, $3) RETURNING id`,
			call, string(kind), body).Scan(&id); err != nil {
			return translate(err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO effect_response (effect_id, kind, body, batch_response_id)
			SELECT a, $2, '', $3 FROM unnest($1::bigint[]) AS a ORDER BY 1`, attempts, string(kind), id)
		return translate(err)
	}
	var settled []int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := record(tx); err != nil {
			return err
		}
		if len(settles) == 0 {
			return nil
		}
		var err error
		settled, err = NewStore(tx).SettleMany(ctx, settles)
		return err
	})
	if err == nil || len(settles) == 0 {
		return settled, err
	}
	// The answer alone, then each settle alone.
	if err := pgx.BeginFunc(ctx, s.db, record); err != nil {
		return nil, err
	}
	settled = settled[:0]
	for _, p := range settles {
		_, err := s.Settle(ctx, p)
		switch {
		case err == nil:
			settled = append(settled, p.EffectID)
		case errors.Is(err, ErrIllegalTransition):
			// Settled meanwhile, by another recovery of the same call.
		default:
			return settled, err
		}
	}
	return settled, nil
}
