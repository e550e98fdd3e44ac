package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
)

// Errors callers test with errors.Is.
var (
	// ErrNoPlan: the campaign has no frozen plan yet, so there is nothing
	// to audit.
	ErrNoPlan = onceplan.New(onceplan.CodeNotApproved, "no approved plan")
	// ErrAmbiguous: a campaign name names more than one campaign.
	ErrAmbiguous = errors.New("ambiguous campaign name")
)

// Evidence sources, as [Metric.Evidence] names them.
const (
	SourceMaildir     = "maildir"
	SourceProviderLog = "provider_log"
	SourceProbe       = "probe"
)

// Metric is the exactly-once audit of one plan (docs/ARCHITECTURE.md, "The
// audit"). The JSON names of approved … holds are the external contract (GET
// /api/v1/campaigns/{id}/audit, `onceplan audit --json`).
type Metric struct {
	CampaignID  string `json:"campaign_id"`
	PlanID      int64  `json:"plan_id"`
	PlanVersion int    `json:"plan_version"`

	// Approved is the number of targets in the frozen plan.
	Approved int `json:"approved"`
	// ExactlyOnce: targets with exactly one done effect at their current epoch.
	ExactlyOnce int `json:"exactly_once"`
	// Missing: targets with no attempt at their current epoch (never
	// started, or bumped and not yet started again).
	Missing int `json:"missing"`
	// InDoubt is Pending + Unknown: the call may or may not have landed.
	InDoubt int `json:"in_doubt"`
	Pending int `json:"pending"`
	Unknown int `json:"unknown"`
	Failed  int `json:"failed"`
	// Rejected: of the failed targets, those the provider refused for
	// good (a definitive rejection, nothing retries it): the only failures
	// the audit holds with. The others ran out of retries, are to be sent
	// again, or failed before Onceplan recorded whether a failure is final.
	Rejected int `json:"rejected"`
	// Exhausted: of the failed targets, those given up after their tries
	// ran out; Unreached: those whose tries all ran out without ever
	// reaching the provider (the request never left: a DNS failure, a
	// refused connection, a TLS failure). The rest of the failed are to be
	// sent again, or failed before Onceplan recorded whether a failure is
	// final.
	Exhausted int `json:"exhausted"`
	Unreached int `json:"unreached"`
	Stranded  int `json:"stranded"`
	Revoked   int `json:"revoked"`
	// Suppressed: targets not sent because their address was suppressed
	// (unsubscribed, bounced hard, complained, or an admin's entry) when
	// their effect was about to be claimed. Consent overrides the plan:
	// they do not make the audit fail, and Approved = ExactlyOnce +
	// Suppressed + Missing + InDoubt + Failed + Stranded + Revoked.
	Suppressed int `json:"suppressed"`
	// Duplicates: key+epochs of the plan's targets with more than one
	// effect in one evidence source (two maildir files, two log lines).
	// Always 0 without evidence: the ledger itself cannot hold two.
	Duplicates int `json:"duplicates"`
	// Unconfirmed: targets done in the ledger for which the evidence shows
	// nothing. Unrecorded: targets the evidence shows delivered that the
	// ledger does not have as done (pending, unknown, failed or missing).
	// Both are 0 without evidence.
	Unconfirmed int `json:"unconfirmed"`
	Unrecorded  int `json:"unrecorded"`
	// Evidence lists the sources reconciled (maildir, provider_log,
	// probe); empty means the ledger alone was counted.
	Evidence []string `json:"evidence"`
	// Outside: of the missing targets, those whose key is held at its
	// current epoch by an attempt made outside any plan. Such an attempt
	// never counts as the target's effect, and while it holds the key the
	// target cannot get one.
	Outside int `json:"outside"`
	// PlanIntact: the plan's frozen rows, read in the snapshot the counts
	// come from, hash to the approved hash, carry their addresses' keys,
	// and were approved by the quorum (Integrity says what was found).
	PlanIntact bool      `json:"plan_intact"`
	Integrity  Integrity `json:"integrity"`
	// Ungated counts the targets whose fate a row decided that the gate
	// would have refused (an attempt while the campaign did not run the
	// plan or while the address was suppressed; a suppressed outcome citing
	// an entry that was not the target's or not in force), written before
	// PostgreSQL enforced the gate (docs/ARCHITECTURE.md, "The gate").
	Ungated int `json:"ungated"`
	// Holds: the plan is intact; missing, in doubt, duplicates and ungated
	// are all 0 (and so are unconfirmed and unrecorded, when evidence was
	// gathered); and every failed target was rejected for good.
	Holds bool `json:"holds"`
	// Reasons says, one sentence each, why it does not hold and what to
	// do, and names every failed target's reason (grouped); empty when it
	// holds with no target failed.
	Reasons []string `json:"reasons"`

	// Failures are the failed targets grouped by whether the failure is
	// final and by reason, most first (at most 20 groups); UngatedRows the
	// rows Ungated counts. Reasons names both.
	Failures    []FailureGroup `json:"failures"`
	UngatedRows []Ungated      `json:"ungated_rows"`
}

// FailureGroup is failed targets with one finality (a ledger.Failure, ""
// for a failure recorded before finality was) and one reason, with the
// first three of their addresses.
type FailureGroup struct {
	Failure string   `json:"failure"`
	Reason  string   `json:"reason"`
	Count   int      `json:"count"`
	Sample  []string `json:"sample"`
}

// finish derives InDoubt, PlanIntact, Holds and the reasons from the counts.
func (m *Metric) finish() {
	if m.Evidence == nil {
		m.Evidence = []string{}
	}
	if m.Failures == nil {
		m.Failures = []FailureGroup{}
	}
	if m.UngatedRows == nil {
		m.UngatedRows = []Ungated{}
	}
	m.InDoubt = m.Pending + m.Unknown
	m.Outside = min(m.Outside, m.Missing)
	m.PlanIntact = m.Integrity.Intact()
	m.Ungated = distinctOrdinals(m.UngatedRows)
	m.Holds = m.PlanIntact && m.Missing == 0 && m.InDoubt == 0 && m.Duplicates == 0 && m.Unconfirmed == 0 && m.Unrecorded == 0 &&
		m.Failed == m.Rejected && m.Ungated == 0
	m.Reasons = m.Explain()
}

// Explain says, one sentence each, why the counts do not hold and what to
// do (Reasons).
func (m Metric) Explain() []string {
	out := m.Integrity.reasons(m.Approved)
	if m.Missing > 0 {
		r := fmt.Sprintf("%s: not started yet (a running campaign starts them; resume a paused or completed one)",
			plural(m.Missing, "target has no effect of its own at its current epoch", "targets have no effect of their own at their current epoch"))
		if m.Outside > 0 {
			r += fmt.Sprintf(", or, for %d of them, held by a ledger row made outside any plan, which never counts as their effect: "+
				"find them in the target list under the state \"outside\" and revoke or resolve that row", m.Outside)
		}
		out = append(out, r+".")
	}
	for _, c := range []struct {
		n         int
		one, many string
		what      string
	}{
		{m.Unknown, "target is unknown", "targets are unknown",
			" (the call may or may not have landed): check the provider, then resolve each as delivered or not delivered."},
		{m.Pending, "target is pending", "targets are pending",
			": a call is in flight, or its worker died and recovery settles it after the owner timeout."},
		{m.Duplicates, "target has", "targets have", " more than one effect in the provider's evidence: see the reconciliation's duplicates."},
		{m.Unconfirmed, "target is", "targets are", " done in the ledger with nothing in the evidence: check the provider for them."},
		{m.Unrecorded, "target is", "targets are",
			" delivered according to the evidence but not done in the ledger: resolve the unknown ones as delivered."},
	} {
		if c.n > 0 {
			out = append(out, plural(c.n, c.one, c.many)+c.what)
		}
	}
	out = append(out, ungatedReasons(m.UngatedRows)...)
	out = append(out, failureReasons(m.Failures)...)
	if out == nil {
		out = []string{}
	}
	return out
}

// failureReasons says, one sentence per group, why the failed targets
// failed and whether that is final: a definitive rejection is the plan's
// outcome for the target (the audit holds with it, and says so); any other
// failure is a target not sent, which does not hold.
func failureReasons(groups []FailureGroup) []string {
	var out []string
	for _, g := range groups {
		named := strings.Join(g.Sample, ", ")
		if g.Count > len(g.Sample) {
			named += fmt.Sprintf(" and %d more", g.Count-len(g.Sample))
		}
		var one, many string
		switch ledger.Failure(g.Failure) {
		case ledger.FailureRejected:
			one = "target was refused by the provider for good, with this answer (a definitive rejection: the audit holds with it)"
			many = "targets were refused by the provider for good, with this answer (a definitive rejection: the audit holds with them)"
		case ledger.FailureExhausted:
			one = "target was given up after its tries ran out, the last with this error (resume to try once more)"
			many = "targets were given up after their tries ran out, the last with this error (resume to try once more)"
		case ledger.FailureUnreached:
			one = "target never reached the provider: every try failed before the request left (a DNS, connection or TLS failure), the last with this error " +
				"(check the provider's address and the network, then resume to try once more)"
			many = "targets never reached the provider: every try failed before the request left (a DNS, connection or TLS failure), the last with this error " +
				"(check the provider's address and the network, then resume to try once more)"
		case ledger.FailureUnsent:
			one = "target did not reach the provider and is to be sent again, not sent yet (resume a paused or completed campaign)"
			many = "targets did not reach the provider and are to be sent again, not sent yet (resume a paused or completed campaign)"
		case ledger.FailureRetry, ledger.FailureQuota:
			one = "target failed and is to be sent again, not sent yet (resume a paused or completed campaign)"
			many = "targets failed and are to be sent again, not sent yet (resume a paused or completed campaign)"
		default:
			one = "target failed before Onceplan recorded whether a failure is final (check the reason; resume to send it again unless the provider refused it for good)"
			many = "targets failed before Onceplan recorded whether a failure is final (check the reason; resume to send again those the provider did not refuse for good)"
		}
		out = append(out, fmt.Sprintf("%s: %q (%s).", plural(g.Count, one, many), g.Reason, named))
	}
	return out
}

// distinctOrdinals counts the targets rows name.
func distinctOrdinals(rows []Ungated) int {
	seen := map[int]bool{}
	for _, u := range rows {
		seen[u.Ordinal] = true
	}
	return len(seen)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Headline is the campaign's one-line result, e.g. "998/1000 exactly once".
func (m Metric) Headline() string {
	verdict := "holds"
	if !m.Holds {
		var why []string
		if !m.PlanIntact {
			why = append(why, "plan not intact")
		}
		for _, c := range []struct {
			n    int
			what string
		}{
			{m.Missing, "missing"}, {m.InDoubt, "in doubt"}, {m.Unreached, "never reached the provider"},
			{m.Exhausted, "given up after their tries"}, {m.Failed - m.Rejected - m.Exhausted - m.Unreached, "failed, to be sent again"},
			{m.Ungated, "decided by a row the gate refuses"}, {m.Duplicates, "duplicated"},
			{m.Unconfirmed, "done without evidence"}, {m.Unrecorded, "delivered but not done in the ledger"},
		} {
			if c.n > 0 {
				why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
			}
		}
		verdict = "does not hold: " + strings.Join(why, ", ")
	}
	if m.Suppressed > 0 {
		return fmt.Sprintf("%d/%d exactly once, %d suppressed; %s", m.ExactlyOnce, m.Approved, m.Suppressed, verdict)
	}
	return fmt.Sprintf("%d/%d exactly once; %s", m.ExactlyOnce, m.Approved, verdict)
}

// ForPlan computes the metric of a frozen plan from the ledger alone. It
// reads the plan's target rows (to check them against the approved hash,
// see [Integrity]) and counts its targets in one snapshot: a transaction
// of its own under REPEATABLE READ, or a savepoint when db is a
// transaction, with PostgreSQL's JIT compilation off.
func ForPlan(ctx context.Context, db onceplan.DB, planID int64) (Metric, error) {
	m := Metric{PlanID: planID}
	var raw int
	count := func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, noJIT); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, customPlans); err != nil {
			return err
		}
		var plans []int64
		var other bool
		if err := tx.QueryRow(ctx, samePlans, planID).Scan(&plans, &other); err != nil {
			return err
		}
		if plans == nil {
			return pgx.ErrNoRows
		}
		arch, err := archivedPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		args := pgx.NamedArgs{"plan": planID, "plans": plans, "other": other}
		var listID int64
		if err := tx.QueryRow(ctx, attemptsIn(metricSQL, arch), args).Scan(
			&m.CampaignID, &m.PlanVersion, &m.Approved, &listID,
			&m.ExactlyOnce, &m.Pending, &m.Unknown, &m.Stranded, &m.Failed, &m.Rejected, &m.Exhausted, &m.Unreached, &m.Revoked, &m.Suppressed); err != nil {
			return err
		}
		if m.Failed > 0 {
			rows, err := tx.Query(ctx, attemptsIn(failedSQL, arch), args)
			if err != nil {
				return err
			}
			if m.Failures, err = pgx.CollectRows(rows, pgx.RowToStructByPos[FailureGroup]); err != nil {
				return err
			}
		}
		raw = m.Approved - m.ExactlyOnce - m.Pending - m.Unknown - m.Stranded - m.Failed - m.Revoked - m.Suppressed
		if raw <= 0 {
			return nil
		}
		return tx.QueryRow(ctx, attemptsIn(outsideSQL, arch), pgx.NamedArgs{"list": listID, "count": m.Approved}).Scan(&m.Outside)
	}
	check := func(tx pgx.Tx) (err error) {
		m.Integrity, err = readIntegrity(ctx, tx, planID)
		return err
	}
	gate := func(tx pgx.Tx) (err error) {
		m.UngatedRows, err = readUngated(ctx, tx, planID)
		return err
	}
	err := inSnapshot(ctx, db, count, check, gate)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("%w: there is no plan %d", onceplan.ErrNotFound, planID)
	}
	if err != nil {
		return m, fmt.Errorf("auditing plan %d: %w", planID, err)
	}
	// Never negative: the counts come from attempts at approved ordinals,
	// at most one per target, so more counted than approved means rows
	// PostgreSQL now refuses were written earlier (the plan is not intact).
	m.Missing = max(raw, 0)
	m.finish()
	if raw < 0 {
		m.PlanIntact, m.Holds = false, false
		at := len(m.Integrity.reasons(m.Approved))
		m.Reasons = slices.Insert(m.Reasons, at, fmt.Sprintf("The plan is not intact: the ledger counts %s for it than it has approved targets "+
			"(an effect for a target that was not approved, or an attempt naming a target with another's key).",
			plural(-raw, "effect more", "effects more")))
	}
	return m, nil
}

// inSnapshot runs each fn in one snapshot of the database. Given a pool,
// they run at once, each on a connection of its own, the others importing
// the first one's snapshot (REPEATABLE READ, read only): reading a
// million frozen rows and counting a million targets then take as long as
// the longer of the two, not their sum. Given a transaction (or a pool
// too small for that), they run one after the other in it (a savepoint).
func inSnapshot(ctx context.Context, db onceplan.DB, fns ...func(pgx.Tx) error) error {
	pool, ok := db.(*pgxpool.Pool)
	if !ok || len(fns) < 2 || pool.Config().MaxConns < int32(len(fns))+1 {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			for _, fn := range fns {
				if err := fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	txs := make([]pgx.Tx, len(fns))
	defer func() {
		for _, tx := range txs {
			if tx != nil {
				tx.Rollback(context.WithoutCancel(ctx))
			}
		}
	}()
	var snapshot string
	for i := range fns {
		tx, err := pool.BeginTx(ctx, auditTx)
		if err != nil {
			return err
		}
		txs[i] = tx
		if i == 0 {
			err = tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot)
		} else {
			_, err = tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snapshot+`'`)
		}
		if err != nil {
			return err
		}
	}
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn(txs[i]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ForCampaign computes the metric of a campaign's current plan: the latest
// frozen one (a version being drafted after it does not count until it is
// approved). ErrNoPlan when nothing was approved yet.
func ForCampaign(ctx context.Context, db onceplan.DB, campaignID string) (Metric, error) {
	planID, err := currentPlan(ctx, db, campaignID)
	if err != nil {
		return Metric{CampaignID: campaignID}, err
	}
	return ForPlan(ctx, db, planID)
}

func currentPlan(ctx context.Context, db onceplan.DB, campaignID string) (int64, error) {
	if !isUUID(campaignID) {
		return 0, fmt.Errorf("%w: there is no campaign %q", onceplan.ErrNotFound, campaignID)
	}
	var planID int64
	err := db.QueryRow(ctx, campaignPlan, campaignID).Scan(&planID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("%w: there is no campaign %s", onceplan.ErrNotFound, campaignID)
	case err != nil:
		return 0, err
	case planID == 0:
		return 0, fmt.Errorf("%w: campaign %s has not been approved yet, so there is nothing to audit", ErrNoPlan, campaignID)
	}
	return planID, nil
}

// Campaign is a campaign as the audit names it.
type Campaign struct {
	ID     string
	Name   string
	PlanID int64 // 0: not approved yet
}

// FindCampaign resolves what an operator typed: a campaign id, or a
// campaign name that exactly one campaign has.
func FindCampaign(ctx context.Context, db onceplan.DB, idOrName string) (Campaign, error) {
	var c Campaign
	if isUUID(idOrName) {
		err := db.QueryRow(ctx, campaignByID, idOrName).Scan(&c.ID, &c.Name, &c.PlanID)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return c, err
		}
	}
	rows, err := db.Query(ctx, campaignsByName, idOrName)
	if err != nil {
		return c, err
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Campaign, error) {
		var x Campaign
		err := r.Scan(&x.ID, &x.Name, &x.PlanID)
		return x, err
	})
	switch {
	case err != nil:
		return c, err
	case len(found) == 0:
		return c, fmt.Errorf("%w: there is no campaign with the id or name %q", onceplan.ErrNotFound, idOrName)
	case len(found) > 1:
		return c, fmt.Errorf("%w: more than one campaign is named %q (%s, %s…): give the campaign's id", ErrAmbiguous, idOrName, found[0].ID, found[1].ID)
	}
	return found[0], nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
