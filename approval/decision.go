package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// DecisionState is what became of a campaign's latest submitted version.
type DecisionState string

// The decisions. Only DecisionPending may still change by itself (an
// approver acts); every other one waits for someone to submit again.
const (
	// DecisionNotSubmitted: nothing waits for a decision — the campaign
	// was never submitted, or its submitted version was changed before
	// anyone decided (the draft is back in the proposer's hands and the
	// approvals given so far no longer count).
	DecisionNotSubmitted DecisionState = "not_submitted"
	// DecisionPending: the submitted version waits for approvals.
	DecisionPending DecisionState = "pending"
	// DecisionApproved: the quorum approved the submitted version; its
	// plan is frozen.
	DecisionApproved DecisionState = "approved"
	// DecisionRejected: an approver sent the submitted version back, with
	// a reason.
	DecisionRejected DecisionState = "rejected"
	// DecisionCancelled: an operator cancelled the campaign before the
	// submitted version was decided.
	DecisionCancelled DecisionState = "cancelled"
)

// Decision is the answer to "what became of what was submitted?", read
// from the rows that decide it: the campaign, its latest submission, the
// approvals of the submitted hash and the trail's first event that ended
// the submission (freeze, reject, cancel, or an edit or import that sent
// it back to draft).
type Decision struct {
	CampaignID string
	// State and CampaignVersion are the campaign's now: a new version may
	// be a draft while an earlier one's decision stands.
	State           State
	CampaignVersion int
	Decision        DecisionState
	// Version, PlanHash and SubmittedAt are the latest submission's (0,
	// "" and the zero time when the campaign was never submitted).
	Version     int
	PlanHash    string
	SubmittedAt time.Time
	// Changed: the submitted version was edited (or its list replaced)
	// before anyone decided; Decision is DecisionNotSubmitted.
	Changed bool
	// Reason is the rejecter's (or canceller's) reason.
	Reason string
	// DecidedBy is the email of whoever decided: the approver whose
	// approval completed the quorum, the rejecter, the canceller. Empty
	// while pending.
	DecidedBy string
	DecidedAt time.Time
	// Approvers are the emails of those who approved the submitted hash,
	// in order; Required is the campaign's quorum.
	Approvers []string
	Required  int
}

// Final reports whether the decision stands until someone submits again:
// everything but pending. A waiter stops at a final decision.
func (d Decision) Final() bool { return d.Decision != DecisionPending }

// Missing is how many more approvals the submitted version needs.
func (d Decision) Missing() int { return max(d.Required-len(d.Approvers), 0) }

// decisionEnds are the trail's actions that end a submission, in the
// order they happen: the first of them after the latest submit decides.
var decisionEnds = []auth.Action{auth.ActionFreeze, auth.ActionReject, auth.ActionCancel, auth.ActionEdit, auth.ActionImport}

// decisionEndNames is decisionEnds as the text[] the trail's query takes.
var decisionEndNames = func() []string {
	names := make([]string, len(decisionEnds))
	for i, a := range decisionEnds {
		names[i] = string(a)
	}
	return names
}()

// decisive are the actions after whose commit a waiter must read the
// decision again: those that end a submission, and each approval (the
// count of a pending decision changes). The transaction that records one
// notifies the waiters (notifyDecision).
var decisive = append([]auth.Action{auth.ActionApprove}, decisionEnds...)

// Decision reads campaign id's decision, in one read-only snapshot so that
// its parts agree. onceplan.ErrNotFound when there is no such campaign.
func (s *Service) Decision(ctx context.Context, id string) (Decision, error) {
	var d Decision
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		d, err = decisionOf(ctx, tx, id)
		return err
	})
	return d, err
}

func decisionOf(ctx context.Context, db onceplan.DB, id string) (Decision, error) {
	c, err := GetCampaign(ctx, db, id)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{CampaignID: c.ID, State: c.State, CampaignVersion: c.Version, Required: c.RequiredApprovals, Decision: DecisionNotSubmitted}
	sub, err := latestSubmission(ctx, db, c.ID)
	if errors.Is(err, onceplan.ErrNotFound) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	d.Version, d.PlanHash, d.SubmittedAt = sub.Version, sub.PlanHash, sub.CreatedAt
	if d.Approvers, err = ApproverEmails(ctx, db, c.ID, sub.Version, sub.PlanHash); err != nil {
		return d, err
	}
	// Event ids, not times, order the trail: a decision's transaction may
	// have begun before the submit it answers committed (it waited on the
	// campaign's lock), but its events are numbered after the lock.
	var action, by, reason string
	var at time.Time
	err = db.QueryRow(ctx, `
		SELECT e.action, coalesce(u.email, ''), e.reason, e.created_at
		FROM campaign_event e LEFT JOIN user_identity() u ON u.id = e.actor_id
		WHERE e.campaign_id = $1 AND e.action = ANY ($2::text[])
		  AND e.id > coalesce((SELECT max(id) FROM campaign_event WHERE campaign_id = $1 AND action = $3), 0)
		ORDER BY e.id LIMIT 1`, c.ID, decisionEndNames, string(auth.ActionSubmit)).Scan(&action, &by, &reason, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if c.State == StatePendingApproval {
			d.Decision = DecisionPending
		}
		return d, nil
	case err != nil:
		return d, err
	}
	switch auth.Action(action) {
	case auth.ActionFreeze:
		// The freeze is the system's; the approval that completed the
		// quorum is the last of them.
		d.Decision, d.DecidedAt = DecisionApproved, at
		if n := len(d.Approvers); n > 0 {
			d.DecidedBy = d.Approvers[n-1]
		}
	case auth.ActionReject:
		d.Decision, d.DecidedBy, d.DecidedAt, d.Reason = DecisionRejected, by, at, reason
	case auth.ActionCancel:
		d.Decision, d.DecidedBy, d.DecidedAt, d.Reason = DecisionCancelled, by, at, reason
	default: // an edit or import sent the submitted version back to draft
		d.Changed = true
	}
	return d, nil
}

// Message says the decision in one or two sentences, for a person or an
// agent to pass on.
func (d Decision) Message() string {
	var msg string
	switch d.Decision {
	case DecisionNotSubmitted:
		if d.State == StateCancelled {
			return "The campaign was cancelled while nothing of it waited for a decision."
		}
		if d.Version == 0 {
			return fmt.Sprintf("Version %d has not been submitted for approval: its proposer submits it when it is ready.", d.CampaignVersion)
		}
		msg = fmt.Sprintf("Version %d was changed after it was submitted, so it is a draft again and the approvals given to it no longer count: its proposer submits it again.", d.Version)
	case DecisionPending:
		return fmt.Sprintf("Version %d waits for %s (%d of %d so far) from a person with the approver role who neither proposed nor last edited it.",
			d.Version, approvalsWord(d.Missing()), len(d.Approvers), d.Required)
	case DecisionApproved:
		msg = fmt.Sprintf("Version %d was approved by %s at %s; its plan is frozen.", d.Version, strings.Join(d.Approvers, ", "), stamp(d.DecidedAt))
	case DecisionRejected:
		msg = fmt.Sprintf("Version %d was rejected by %s at %s: %q. Its proposer changes the draft and submits it again.", d.Version, d.DecidedBy, stamp(d.DecidedAt), d.Reason)
	case DecisionCancelled:
		msg = fmt.Sprintf("The campaign was cancelled by %s at %s before version %d was decided.", d.DecidedBy, stamp(d.DecidedAt), d.Version)
		if d.Reason != "" {
			msg = strings.TrimSuffix(msg, ".") + fmt.Sprintf(": %q.", d.Reason)
		}
		return msg
	}
	if d.CampaignVersion > d.Version && d.State == StateDraft {
		msg += fmt.Sprintf(" Version %d is a draft that needs its own approval once submitted.", d.CampaignVersion)
	}
	return msg
}

func approvalsWord(n int) string {
	if n == 1 {
		return "1 more approval"
	}
	return fmt.Sprintf("%d more approvals", n)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// StepKind names what a NextStep asks for; the UI and the API link each
// kind to the page where it is done.
type StepKind string

// The next steps.
const (
	StepSubmit  StepKind = "submit"  // the proposer submits the draft
	StepRevise  StepKind = "revise"  // the proposer changes a rejected draft and submits it again
	StepApprove StepKind = "approve" // approvers approve the submitted version (Count: approvals missing)
	StepStart   StepKind = "start"   // an operator starts the approved campaign
	StepResume  StepKind = "resume"  // an operator resumes the paused campaign
	// StepResolveUnknowns: an operator resolves the unknown targets
	// (Count of them), each as delivered or not.
	StepResolveUnknowns StepKind = "resolve_unknowns"
	// StepStranded: an operator checks the stranded targets (Count) at
	// the provider and revokes each once it is withdrawn there.
	StepStranded StepKind = "stranded"
	// StepFailed: targets given up after their tries (Count), or failed
	// and not sent again because the campaign stopped; an operator reads
	// the last error and resumes once the cause is fixed.
	StepFailed StepKind = "failed"
	// StepRefused: the provider refused targets for good (Count); an
	// operator reads its answer and, once the cause (an address, the
	// message, the account) is fixed, resumes to send them once more.
	StepRefused StepKind = "refused"
	// StepUnreached: targets never reached the provider (Count): every
	// try failed before the request left. An operator checks the
	// provider's address and the network, then resumes.
	StepUnreached StepKind = "unreached"
	// StepRunWorker: no live worker process serves the provider.
	StepRunWorker StepKind = "run_worker"
	// StepNone: nobody needs to do anything now; What says why.
	StepNone StepKind = "none"
)

// NextStep is one thing a person must do next for a campaign to go on.
type NextStep struct {
	// Who holds the role that may do it; "" for StepNone.
	Who  auth.Role
	Kind StepKind
	// What says it in a sentence.
	What string
	// Count is how many: approvals missing, or targets concerned.
	Count int
}

// WaitingFor says who must act before there is a new decision: the
// approvers while pending, the proposer when nothing is submitted or the
// submitted version was rejected; nobody once approved or cancelled.
func (d Decision) WaitingFor() []NextStep {
	switch d.Decision {
	case DecisionPending:
		return []NextStep{approveStep(d)}
	case DecisionRejected:
		if d.State == StateDraft && d.CampaignVersion == d.Version {
			return []NextStep{reviseStep(d)}
		}
	case DecisionNotSubmitted:
		if d.State == StateDraft {
			return []NextStep{submitStep(d.CampaignVersion, -1)}
		}
	}
	return []NextStep{}
}

func approveStep(d Decision) NextStep {
	return NextStep{Who: auth.RoleApprover, Kind: StepApprove, Count: d.Missing(), What: fmt.Sprintf(
		"Version %d needs %s (%d of %d so far): a person with the approver role who neither proposed nor last edited it reviews and approves it on its approval page.",
		d.Version, approvalsWord(d.Missing()), len(d.Approvers), d.Required)}
}

func reviseStep(d Decision) NextStep {
	return NextStep{Who: auth.RoleProposer, Kind: StepRevise, What: fmt.Sprintf(
		"Version %d was rejected by %s: %q. The proposer changes the draft and submits it again.", d.Version, d.DecidedBy, d.Reason)}
}

// submitStep asks the proposer to submit version; targets is the draft's
// target count (-1: not known).
func submitStep(version, targets int) NextStep {
	what := fmt.Sprintf("Version %d is a draft: the proposer submits it for approval when it is ready.", version)
	if targets == 0 {
		what = fmt.Sprintf("Version %d is a draft without targets: the proposer imports its targets, then submits it for approval.", version)
	}
	return NextStep{Who: auth.RoleProposer, Kind: StepSubmit, What: what}
}

// NextSteps says what a person must do next for campaign c to go on, by
// its state, its decision d, its counts k and whether a live worker
// serves its provider (sv): never empty — when nobody needs to act, one
// StepNone says why. now is the clock (a scheduled start).
func NextSteps(c Campaign, d Decision, k Counts, sv Serving, now time.Time) []NextStep {
	if c.ArchivedAt != nil {
		// No action is taken on an archived campaign (archivedError).
		return []NextStep{{Kind: StepNone, What: fmt.Sprintf(
			"Nothing: the campaign is archived (%d of %d targets done) and never runs again; a clone of it sends anew.", k.Done, k.Planned)}}
	}
	var steps []NextStep
	switch c.State {
	case StateDraft:
		if d.Decision == DecisionRejected && d.Version == c.Version {
			steps = append(steps, reviseStep(d))
		} else {
			targets := -1
			if c.PlanID == 0 {
				targets = k.Planned // a draft's counts are its list's
			}
			steps = append(steps, submitStep(c.Version, targets))
		}
	case StatePendingApproval:
		if d.Decision == DecisionPending { // else decided since c was read
			steps = append(steps, approveStep(d))
		}
	case StateApproved:
		if c.ScheduledAt == nil {
			steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepStart,
				What: "The campaign is approved: an operator starts it (nothing is sent before)."})
		}
	case StatePaused:
		steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepResume,
			What: "The campaign is paused: an operator resumes it, or cancels it."})
	}
	if sv.Warning != "" {
		steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepRunWorker, What: sv.Warning})
	}
	if c.PlanID != 0 {
		if k.Unknown > 0 {
			steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepResolveUnknowns, Count: k.Unknown, What: targetsAre(k.Unknown, "unknown") +
				": the provider may or may not have acted. An operator checks the provider and resolves each as delivered or not delivered (one by one, or with the provider's evidence)."})
		}
		if k.Stranded > 0 {
			steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepStranded, Count: k.Stranded, What: targetsAre(k.Stranded, "stranded") +
				": the provider holds them but can never complete them. An operator checks the provider and revokes each once it is withdrawn there."})
		}
		steps = append(steps, failedSteps(c, k)...)
		if c.State == StateCompleted && k.NotStarted > 0 {
			steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepResume, Count: k.NotStarted, What: fmt.Sprintf(
				"%s never sent (no attempt at all): an operator resumes the campaign to send them.", count(k.NotStarted, "target was", "targets were"))})
		}
	}
	if len(steps) > 0 {
		return steps
	}
	var why string
	switch c.State {
	case StateApproved:
		why = fmt.Sprintf("Nothing: the campaign is approved and starts by itself at %s (an operator may start it earlier).", stamp(*c.ScheduledAt))
		if !c.ScheduledAt.After(now) {
			why = "Nothing: the campaign is approved and its scheduled time has come; it starts by itself at the workers' next maintenance round."
		}
	case StateRunning:
		why = fmt.Sprintf("Nothing: the campaign is running and its workers send the remaining targets by themselves (%d of %d done).", k.Done, k.Planned)
	case StateCompleted:
		why = fmt.Sprintf("Nothing: the campaign completed (%d of %d targets done).", k.Done, k.Planned)
	case StateCancelled:
		why = "Nothing: the campaign was cancelled, and nothing more is sent."
	default:
		why = "Nothing needs a person now."
	}
	return []NextStep{{Kind: StepNone, What: why}}
}

// failedSteps are the steps for campaign c's failed targets, by how they
// ended (Counts.Refused, GivenUp, Unreached): what happened, and what an
// operator can do. While the campaign runs, a failed target still to be
// sent again needs nobody (the run page says when it is tried again);
// a cancelled campaign is never resumed, so its steps only say what
// happened.
func failedSteps(c Campaign, k Counts) []NextStep {
	resume := " An operator resumes the campaign once the cause is fixed, to send each once more."
	if c.State == StateCancelled {
		resume = " The campaign was cancelled: a clone of it sends them anew."
	}
	var steps []NextStep
	if k.Unreached > 0 {
		steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepUnreached, Count: k.Unreached, What: fmt.Sprintf(
			"%s the provider: every try failed before the request left (a DNS, connection or TLS failure; the run page names it). "+
				"An operator checks the provider's address (--provider) and the network from the workers' machines.", count(k.Unreached, "target never reached", "targets never reached")) + resume})
	}
	if k.Refused > 0 {
		steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepRefused, Count: k.Refused, What: fmt.Sprintf(
			"%s by the provider for good (a definitive rejection; the run page shows its answer). "+
				"An operator reads the answer and fixes what it names (the address, the message, the account).", count(k.Refused, "target was refused", "targets were refused")) + resume})
	}
	failed := k.GivenUp
	what := "%s given up after the tries ran out, the provider answering each time (the run page shows the last error)."
	if c.State != StateRunning {
		// Stopped: a failure that was to be sent again is not, until a
		// resume.
		failed += k.FailedToRetry()
		what = "%s given up after the tries ran out, or not sent again because the campaign stopped (the run page shows the last error)."
	}
	if failed > 0 {
		steps = append(steps, NextStep{Who: auth.RoleOperator, Kind: StepFailed, Count: failed,
			What: fmt.Sprintf(what, count(failed, "target failed and was", "targets failed and were")) + resume})
	}
	return steps
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func targetsAre(n int, state string) string {
	if n == 1 {
		return "1 target is " + state
	}
	return fmt.Sprintf("%d targets are %s", n, state)
}
