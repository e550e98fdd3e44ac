// Package audittest builds campaigns with ledgers of a known shape for
// testing and timing the audit.
//
// [Fixture] goes through the approval workflow and the ledger's store, as
// production does, for tests. [Seed] writes a large plan and its ledger
// directly in SQL (through the ledger's triggers like any writer, but not
// through the importer, the approval workflow or River), so that a million
// targets take a couple of minutes rather than an hour, for
// BenchmarkAuditMillion and internal/tools/bench.
package audittest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Seeded is a campaign made by Seed and the metric its ledger must give.
type Seeded struct {
	CampaignID string
	PlanID     int64
	PlanHash   string
	Want       audit.Metric
}

// Seed creates a running campaign with one frozen plan of n targets
// (n >= 1000 gives every shape below at least once) and a ledger in which,
// by ordinal i:
//
//   - i%100 == 1: failed once, then done (two attempts);
//   - i%1000 == 2: unknown; 3: pending; 4: stranded; 5: failed;
//     6: done, then revoked; 7: never started (missing);
//     8: done at epoch 0, bumped, done again at epoch 1;
//   - every other target: done at the first attempt.
//
// Each step is one set-based statement, so the triggers that guard the
// ledger run for every row.
func Seed(ctx context.Context, db onceplan.DB, n int) (Seeded, error) {
	var s Seeded
	if n < 1 {
		return s, fmt.Errorf("audittest: a plan needs at least one target, not %d", n)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return s, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	var user, approver int64
	if err := tx.QueryRow(ctx, `INSERT INTO app_user (email, roles) VALUES ('audittest@example.com', '{proposer}')
		ON CONFLICT (email) DO UPDATE SET name = app_user.name RETURNING id`).Scan(&user); err != nil {
		return s, fmt.Errorf("audittest: user: %w", err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO app_user (email, roles) VALUES ('audittest-approver@example.com', '{approver}')
		ON CONFLICT (email) DO UPDATE SET name = app_user.name RETURNING id`).Scan(&approver); err != nil {
		return s, fmt.Errorf("audittest: approver: %w", err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO campaign (name, provider, created_by) VALUES ($1, 'outbox', $2) RETURNING id`,
		fmt.Sprintf("audit seed %d", time.Now().UnixNano()), user).Scan(&s.CampaignID); err != nil {
		return s, fmt.Errorf("audittest: campaign: %w", err)
	}
	// The list as the import writes it: its rows, keyed as the import keys
	// them, then its own row with their digest, in one transaction
	// (migration 0014). No target has variables.
	var list int64
	if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('target_list', 'id'))`).Scan(&list); err != nil {
		return s, fmt.Errorf("audittest: list id: %w", err)
	}
	d := plan.NewListDigest()
	var keyErr error
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"target"}, []string{"list_id", "ordinal", "target", "key", "line"},
		pgx.CopyFromFunc(func() ([]any, error) {
			i := d.Count() + 1
			if i > n {
				return nil, nil
			}
			target, key, err := plan.TargetKey(s.CampaignID, "email.send", fmt.Sprintf("person%d@example.com", i))
			if err != nil {
				keyErr = err
				return nil, err
			}
			d.Add(string(key), plan.CanonicalVars(nil))
			return []any{list, i, target.Value, string(key), i + 1}, nil
		}))
	if err != nil {
		return s, fmt.Errorf("audittest: targets: %w", errors.Join(err, keyErr))
	}
	digest := d.Sum()
	payload := plan.Payload{From: "bench@example.com", Subject: "Hello", Text: "Hi"}
	s.PlanHash = plan.PlanHash(plan.PlanHashInput{Payload: payload, Provider: "outbox", Tool: "email.send", TargetCount: n, ListDigest: digest})
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"list", `INSERT INTO target_list (id, campaign_id, target_count, digest, created_by) VALUES ($1, $2, $3, $4, $5)`,
			[]any{list, s.CampaignID, n, digest, user}},
		{"draft", `INSERT INTO draft (campaign_id, version, from_addr, subject, text_body, list_id, proposed_by, last_edited_by)
			VALUES ($1, 1, $2, $3, $4, $5, $6, $6)`, []any{s.CampaignID, payload.From, payload.Subject, payload.Text, list, user}},
		// Submitted, and approved by someone else, as a plan must be.
		{"submit", `UPDATE campaign SET state = 'pending_approval' WHERE id = $1`, []any{s.CampaignID}},
		{"submission", `INSERT INTO submission (campaign_id, version, plan_hash, submitted_by) VALUES ($1, 1, $2, $3)`,
			[]any{s.CampaignID, s.PlanHash, user}},
		{"approval", `INSERT INTO approval (campaign_id, version, plan_hash, approver_id) VALUES ($1, 1, $2, $3)`,
			[]any{s.CampaignID, s.PlanHash, approver}},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return s, fmt.Errorf("audittest: %s: %w", st.what, err)
		}
	}
	if err := tx.QueryRow(ctx, `INSERT INTO plan (campaign_id, version, provider, tool, from_addr, subject, text_body, html_body,
		                  list_id, target_count, plan_hash, proposed_by)
		VALUES ($1, 1, 'outbox', 'email.send', $2, $3, $4, '', $5, $6, $7, $8)
		RETURNING id`, s.CampaignID, payload.From, payload.Subject, payload.Text, list, n, s.PlanHash, user).Scan(&s.PlanID); err != nil {
		return s, fmt.Errorf("audittest: plan: %w", err)
	}
	for _, st := range []struct{ what, sql string }{
		{"campaign approved", `UPDATE campaign SET plan_id = @plan, state = 'approved' WHERE id = (SELECT campaign_id FROM plan WHERE id = @plan)`},
		{"run", `INSERT INTO run (campaign_id, plan_id, job_count) SELECT campaign_id, id, 0 FROM plan WHERE id = @plan`},
		{"campaign running", `UPDATE campaign SET state = 'running' WHERE plan_id = @plan`},
	} {
		if _, err := tx.Exec(ctx, st.sql, pgx.NamedArgs{"plan": s.PlanID}); err != nil {
			return s, fmt.Errorf("audittest: %s: %w", st.what, err)
		}
	}
	// The ledger, shape by shape (see the doc comment), written through
	// the ledger's own batch statements, a chunk of targets at a time.
	store := ledger.NewStore(tx)
	for from := 1; from <= n; from += seedChunk {
		if err := seedLedger(ctx, tx, store, s.PlanID, list, from, min(from+seedChunk-1, n)); err != nil {
			return s, fmt.Errorf("audittest: the ledger of targets %d to %d: %w", from, min(from+seedChunk-1, n), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s, err
	}
	// What autovacuum does soon after a bulk write: statistics, and the
	// visibility map that lets the audit's index-only scans skip the heap.
	for _, table := range []string{"target", "effect", "effect_bump"} {
		if _, err := db.Exec(ctx, `VACUUM (ANALYZE) `+table); err != nil {
			return s, fmt.Errorf("audittest: vacuuming %s: %w", table, err)
		}
	}
	s.Want = want(s, n)
	return s, nil
}

// seededRejection is the reason of the seeded definitive rejections.
const seededRejection = "550 5.1.1 no such user (seeded)"

// seedChunk is how many targets seedLedger writes the ledger of at once.
const seedChunk = 10_000

// seedLedger writes the ledger of targets from…to (see Seed's shapes).
func seedLedger(ctx context.Context, tx pgx.Tx, store *ledger.Store, planID, list int64, from, to int) error {
	rows, err := tx.Query(ctx, `SELECT ordinal, key FROM target WHERE list_id = $1 AND ordinal BETWEEN $2 AND $3 ORDER BY ordinal`, list, from, to)
	if err != nil {
		return err
	}
	keys := map[int]ledger.Key{}
	var (
		ordinal int
		key     string
	)
	if _, err := pgx.ForEachRow(rows, []any{&ordinal, &key}, func() error { keys[ordinal] = ledger.Key(key); return nil }); err != nil {
		return err
	}
	pick := func(keep func(i int) bool) []int {
		var out []int
		for i := from; i <= to; i++ {
			if keep(i) {
				out = append(out, i)
			}
		}
		return out
	}
	// attempt claims the ordinals, records a raw answer for those raw
	// keeps, and settles those settle gives a verdict.
	attempt := func(ordinals []int, raw func(i int) bool, settle func(i int, id int64) (ledger.SettleParams, bool)) error {
		reqs := make([]ledger.ClaimRequest, len(ordinals))
		for j, i := range ordinals {
			reqs[j] = ledger.ClaimRequest{ClaimParams: ledger.ClaimParams{Key: keys[i], Owner: "audittest", PlanID: planID, Ordinal: i}}
		}
		won, err := store.ClaimMany(ctx, reqs, ledger.Gate{})
		if err != nil {
			return err
		}
		var recs []ledger.ResponseRecord
		var ps []ledger.SettleParams
		for _, e := range won {
			if raw(e.Ordinal) {
				recs = append(recs, ledger.ResponseRecord{EffectID: e.ID, Kind: ledger.ResponseSend, Body: fmt.Appendf(nil, "250 2.0.0 Ok: queued as %d", e.ID)})
			}
			if p, ok := settle(e.Ordinal, e.ID); ok {
				ps = append(ps, p)
			}
		}
		if len(recs) > 0 {
			if err := store.RecordResponses(ctx, recs); err != nil {
				return err
			}
		}
		if len(ps) > 0 {
			_, err = store.SettleMany(ctx, ps)
		}
		return err
	}
	done := func(_ int, id int64) (ledger.SettleParams, bool) {
		return ledger.SettleParams{EffectID: id, State: ledger.StateDone, Receipt: fmt.Sprintf("r-%d", id)}, true
	}
	always := func(int) bool { return true }

	// First attempts: every target but the missing ones.
	err = attempt(pick(func(i int) bool { return i%1000 != 7 }),
		func(i int) bool { return i%1000 != 2 && i%1000 != 3 },
		func(i int, id int64) (ledger.SettleParams, bool) {
			switch {
			case i%100 == 1:
				return ledger.SettleParams{EffectID: id, State: ledger.StateFailed, Reason: "seeded", Failure: ledger.FailureRetry}, true
			case i%1000 == 5:
				return ledger.SettleParams{EffectID: id, State: ledger.StateFailed, Reason: seededRejection, Failure: ledger.FailureRejected}, true
			case i%1000 == 2:
				return ledger.SettleParams{EffectID: id, State: ledger.StateUnknown, Reason: "seeded"}, true
			case i%1000 == 3:
				return ledger.SettleParams{}, false // left pending
			case i%1000 == 4:
				return ledger.SettleParams{EffectID: id, State: ledger.StateStranded, Receipt: fmt.Sprintf("r-%d", id), Reason: "seeded"}, true
			}
			return done(i, id)
		})
	if err != nil {
		return err
	}
	// Second attempts of the failed ones, done.
	if err := attempt(pick(func(i int) bool { return i%100 == 1 }), always, done); err != nil {
		return err
	}
	for _, i := range pick(func(i int) bool { return i%1000 == 6 }) {
		if _, err := store.Revoke(ctx, ledger.RevokeParams{Key: keys[i], Actor: "user:audittest@example.com", Reason: "seeded"}); err != nil {
			return err
		}
	}
	// Done at epoch 0, bumped, done again at epoch 1.
	bumped := pick(func(i int) bool { return i%1000 == 8 })
	for _, i := range bumped {
		if _, err := store.Bump(ctx, ledger.BumpParams{Key: keys[i], ActorKind: ledger.ActorHuman, Actor: "user:audittest@example.com", Reason: "seeded"}); err != nil {
			return err
		}
	}
	return attempt(bumped, always, done)
}

// want is the metric Seed's ledger gives, counted the slow way in Go.
func want(s Seeded, n int) audit.Metric {
	m := audit.Metric{CampaignID: s.CampaignID, PlanID: s.PlanID, PlanVersion: 1, Approved: n, Evidence: []string{},
		Failures: []audit.FailureGroup{}, UngatedRows: []audit.Ungated{}}
	rejected := audit.FailureGroup{Failure: string(ledger.FailureRejected), Reason: seededRejection}
	for i := 1; i <= n; i++ {
		switch {
		case i%100 == 1:
			m.ExactlyOnce++
		case i%1000 == 2:
			m.Unknown++
		case i%1000 == 3:
			m.Pending++
		case i%1000 == 4:
			m.Stranded++
		case i%1000 == 5:
			m.Failed++
			m.Rejected++
			if len(rejected.Sample) < 3 {
				rejected.Sample = append(rejected.Sample, fmt.Sprintf("person%d@example.com", i))
			}
		case i%1000 == 6:
			m.Revoked++
		case i%1000 == 7:
			m.Missing++
		default:
			m.ExactlyOnce++
		}
	}
	if rejected.Count = m.Rejected; rejected.Count > 0 {
		m.Failures = append(m.Failures, rejected)
	}
	m.InDoubt = m.Pending + m.Unknown
	// An intact plan: every row as approved, approved by one approver.
	m.Integrity = audit.Integrity{Rows: n, PlanHash: s.PlanHash, ApprovedHash: s.PlanHash, Approvals: 1, RequiredApprovals: 1}
	m.PlanIntact = true
	m.Reasons = m.Explain()
	return m
}

// Finish makes s's campaign a finished one, as the archive takes them: its
// pending attempts answered and done, its unknown ones resolved as
// delivered by a person, and the campaign cancelled — the seeded targets
// never started stay missing, which a cancelled campaign may leave and a
// completed one may not (the archive asks the ledger whether a completed
// campaign has anything left to send: target_open, migration 0038).
func Finish(ctx context.Context, db onceplan.DB, s Seeded) error {
	if err := Settle(ctx, db, s); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `UPDATE campaign SET state = 'cancelled' WHERE id = $1`, s.CampaignID)
	return err
}

// Settle answers s's pending attempts (done) and has a person resolve its
// unknown ones as delivered, leaving the campaign as it is: nothing of its
// plan is in doubt any more.
func Settle(ctx context.Context, db onceplan.DB, s Seeded) error {
	rows, err := db.Query(ctx, `SELECT id, key, state::text FROM effect WHERE plan_id = $1 AND state IN ('pending', 'unknown')`, s.PlanID)
	if err != nil {
		return err
	}
	var (
		id         int64
		key, state string
		recs       []ledger.ResponseRecord
		ps         []ledger.SettleParams
		unknown    []ledger.Key
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &key, &state}, func() error {
		if state == string(ledger.StatePending) {
			recs = append(recs, ledger.ResponseRecord{EffectID: id, Kind: ledger.ResponseSend, Body: fmt.Appendf(nil, "250 2.0.0 Ok: queued as %d", id)})
			ps = append(ps, ledger.SettleParams{EffectID: id, State: ledger.StateDone, Receipt: fmt.Sprintf("r-%d", id)})
		} else {
			unknown = append(unknown, ledger.Key(key))
		}
		return nil
	}); err != nil {
		return err
	}
	store := ledger.NewStore(db)
	if len(recs) > 0 {
		if err := store.RecordResponses(ctx, recs); err != nil {
			return fmt.Errorf("audittest: finishing: %w", err)
		}
		if _, err := store.SettleMany(ctx, ps); err != nil {
			return fmt.Errorf("audittest: finishing: %w", err)
		}
	}
	for _, k := range unknown {
		if _, err := store.Resolve(ctx, ledger.ResolveParams{Key: k, Outcome: ledger.Delivered, Actor: "user:audittest@example.com", Reason: "seeded"}); err != nil {
			return fmt.Errorf("audittest: finishing: %w", err)
		}
	}
	return nil
}
