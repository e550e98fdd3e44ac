// Package audittest builds campaigns with ledgers of a known shape for
// testing and timing the audit.
//
// [Fixture] goes through the approval workflow and the ledger's store, as
// production does, for tests. [Seed] writes a large plan and its ledger
// directly in SQL (through the ledger's triggers like any writer, but not
// through the importer, the approval workflow or River), so that a million
// targets take a couple of minutes rather than an hour; [Measure] times the
// audit of such a plan against a count(*) of the ledger, for
// BenchmarkAuditMillion and internal/tools/bench.
package audittest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/audit"
	"github.com/onceplan/onceplan/plan"
)

// DB is what seeding needs: a pool or a connection.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

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
func Seed(ctx context.Context, db DB, n int) (Seeded, error) {
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
	// The ledger, shape by shape (see the doc comment).
	ledger := []struct {
		what string
		sql  string
	}{
		{"campaign approved", `UPDATE campaign SET plan_id = @plan, state = 'approved' WHERE id = (SELECT campaign_id FROM plan WHERE id = @plan)`},
		{"run", `INSERT INTO run (campaign_id, plan_id, job_count) SELECT campaign_id, id, 0 FROM plan WHERE id = @plan`},
		{"campaign running", `UPDATE campaign SET state = 'running' WHERE plan_id = @plan`},
		{"first attempts", `INSERT INTO effect (key, epoch, attempt, owner, plan_id, ordinal)
			SELECT key, 0, 1, 'audittest', @plan, ordinal FROM target WHERE list_id = @list AND ordinal % 1000 <> 7`},
		{"raw answers", `INSERT INTO effect_response (effect_id, kind, body)
			SELECT id, 'send', convert_to('250 2.0.0 Ok: queued as ' || id, 'UTF8') FROM effect WHERE plan_id = @plan AND ordinal % 1000 NOT IN (2, 3)`},
		{"settle", `UPDATE effect SET
			  state = (CASE WHEN ordinal % 100 = 1 OR ordinal % 1000 = 5 THEN 'failed'
			                WHEN ordinal % 1000 = 2 THEN 'unknown'
			                WHEN ordinal % 1000 = 4 THEN 'stranded'
			                ELSE 'done' END)::effect_state,
			  receipt = CASE WHEN ordinal % 100 = 1 OR ordinal % 1000 IN (2, 5) THEN NULL ELSE 'r-' || id END,
			  reason = CASE WHEN ordinal % 100 = 1 OR ordinal % 1000 IN (2, 4, 5) THEN 'seeded' END
			WHERE plan_id = @plan AND ordinal % 1000 <> 3`},
		{"second attempts", `INSERT INTO effect (key, epoch, attempt, owner, plan_id, ordinal)
			SELECT key, 0, 2, 'audittest', @plan, ordinal FROM target WHERE list_id = @list AND ordinal % 100 = 1`},
		{"second answers", `INSERT INTO effect_response (effect_id, kind, body)
			SELECT id, 'send', '\x323530'::bytea FROM effect WHERE plan_id = @plan AND attempt = 2`},
		{"second settle", `UPDATE effect SET state = 'done', receipt = 'r-' || id WHERE plan_id = @plan AND attempt = 2`},
		{"revoke", `UPDATE effect SET state = 'revoked', revoked_by = 'user:audittest@example.com', revoke_reason = 'seeded'
			WHERE plan_id = @plan AND ordinal % 1000 = 6`},
		{"bump", `INSERT INTO effect_bump (key, epoch, actor_kind, actor, reason)
			SELECT key, 1, 'human', 'user:audittest@example.com', 'seeded' FROM target WHERE list_id = @list AND ordinal % 1000 = 8`},
		{"bumped attempts", `INSERT INTO effect (key, epoch, attempt, owner, plan_id, ordinal)
			SELECT key, 1, 1, 'audittest', @plan, ordinal FROM target WHERE list_id = @list AND ordinal % 1000 = 8`},
		{"bumped answers", `INSERT INTO effect_response (effect_id, kind, body)
			SELECT id, 'send', '\x323530'::bytea FROM effect WHERE plan_id = @plan AND epoch = 1`},
		{"bumped settle", `UPDATE effect SET state = 'done', receipt = 'r-' || id WHERE plan_id = @plan AND epoch = 1`},
	}
	for _, st := range ledger {
		if _, err := tx.Exec(ctx, st.sql, pgx.NamedArgs{"list": list, "plan": s.PlanID}); err != nil {
			return s, fmt.Errorf("audittest: %s: %w", st.what, err)
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

// want is the metric Seed's ledger gives, counted the slow way in Go.
func want(s Seeded, n int) audit.Metric {
	m := audit.Metric{CampaignID: s.CampaignID, PlanID: s.PlanID, PlanVersion: 1, Approved: n, Evidence: []string{}}
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
		case i%1000 == 6:
			m.Revoked++
		case i%1000 == 7:
			m.Missing++
		default:
			m.ExactlyOnce++
		}
	}
	m.InDoubt = m.Pending + m.Unknown
	// An intact plan: every row as approved, approved by one approver.
	m.Integrity = audit.Integrity{Rows: n, PlanHash: s.PlanHash, ApprovedHash: s.PlanHash, Approvals: 1, RequiredApprovals: 1}
	m.PlanIntact = true
	m.Reasons = m.Explain()
	return m
}

// Timing is one measurement of the audit of a seeded plan against a
// baseline taken in the same run on the same database: a count(*) of the
// whole ledger (machines are shared and noisy; compare the ratio).
type Timing struct {
	Targets    int
	LedgerRows int
	Seed       time.Duration
	// Audit and Count are the medians of Runs runs of audit.ForPlan and of
	// SELECT count(*) FROM effect.
	Audit  time.Duration
	Count  time.Duration
	Runs   int
	Metric audit.Metric
}

// Ratio is Audit / Count.
func (t Timing) Ratio() float64 { return float64(t.Audit) / float64(t.Count) }

func (t Timing) String() string {
	return fmt.Sprintf("audit of %d targets (%d ledger rows): %v (median of %d); count(*) of the ledger: %v; ratio %.1f; seeding took %v",
		t.Targets, t.LedgerRows, t.Audit.Round(time.Millisecond), t.Runs, t.Count.Round(time.Millisecond), t.Ratio(), t.Seed.Round(time.Second))
}

// Measure seeds a plan of n targets (see Seed) and times its audit. It
// fails when the audit's numbers differ from the seeded ledger's.
func Measure(ctx context.Context, db *pgxpool.Pool, n, runs int) (Timing, error) {
	if runs < 1 {
		runs = 5
	}
	t := Timing{Targets: n, Runs: runs}
	start := time.Now()
	s, err := Seed(ctx, db, n)
	if err != nil {
		return t, err
	}
	t.Seed = time.Since(start)
	var audits, counts []time.Duration
	for range runs {
		start := time.Now()
		m, err := audit.ForPlan(ctx, db, s.PlanID)
		if err != nil {
			return t, err
		}
		audits = append(audits, time.Since(start))
		t.Metric = m
		start = time.Now()
		if err := db.QueryRow(ctx, `SELECT count(*) FROM effect`).Scan(&t.LedgerRows); err != nil {
			return t, err
		}
		counts = append(counts, time.Since(start))
	}
	if !reflect.DeepEqual(t.Metric, s.Want) {
		return t, fmt.Errorf("audittest: the audit says %+v, the seeded ledger %+v", t.Metric, s.Want)
	}
	t.Audit, t.Count = median(audits), median(counts)
	return t, nil
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
