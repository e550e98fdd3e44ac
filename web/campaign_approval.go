package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// approvalPageSize is how many targets one page of the approval list shows.
const approvalPageSize = 100

// sampleCount is how many rendered messages the approval page shows.
const sampleCount = 3

// whyNot is the reason of a refusal for a person: the error's message
// without its kind, as a sentence.
func whyNot(err error) string {
	msg := err.Error()
	for _, kind := range []error{onceplan.ErrForbidden, onceplan.ErrConflict} {
		msg = strings.TrimPrefix(msg, kind.Error()+": ")
	}
	if msg == "" {
		return msg
	}
	return strings.ToUpper(msg[:1]) + msg[1:]
}

// errIsRefusal reports whether err is the workflow saying no (the role,
// the state, authorship), rather than failing.
func errIsRefusal(err error) bool {
	return errors.Is(err, onceplan.ErrForbidden) || errors.Is(err, onceplan.ErrConflict)
}

// approvalPage gathers what an approver is shown: the hash the approve
// button posts, the count, sample messages, the list, the quorum and what
// changed since the last approved version.
func (s *Server) approvalPage(c echo.Context, camp approval.Campaign) (view.ApprovalPage, error) {
	ctx := c.Request().Context()
	d, err := approval.GetDraft(ctx, s.cfg.Pool, camp.ID, camp.Version)
	if err != nil {
		return view.ApprovalPage{}, err
	}
	hash := d.Hash(camp)
	p := view.ApprovalPage{
		Page: s.page(c, "Approve "+camp.Name, "campaigns"), Campaign: campaignView(camp),
		PlanHash: hash, TargetCount: d.TargetCount, Required: camp.RequiredApprovals,
		Payload: view.Payload{From: d.Payload.From, Subject: d.Payload.Subject, Text: d.Payload.Text, HTML: d.Payload.HTML},
	}
	if p.Approvers, err = approval.ApproverEmails(ctx, s.cfg.Pool, camp.ID, camp.Version, hash); err != nil {
		return p, err
	}
	p.Approvals = len(p.Approvers)
	names, err := auth.Emails(ctx, s.cfg.Pool, []int64{d.ProposedBy, d.LastEditedBy})
	if err != nil {
		return p, err
	}
	p.ProposedBy = names[d.ProposedBy]
	if d.LastEditedBy != d.ProposedBy {
		p.ProposedBy += ", last edited by " + names[d.LastEditedBy]
	}
	// The service's rule, as Approve applies it: the role, the state,
	// authorship as submitted, an approval already given.
	switch err := s.cfg.Approval.ApproveAllowed(ctx, mustActor(c), camp); {
	case err == nil:
		p.CanApprove = true
	case errIsRefusal(err):
		p.WhyNot = whyNot(err)
		if contains(p.Approvers, mustActor(c).Email) {
			p.WhyNot += "; it needs " + strconv.Itoa(camp.RequiredApprovals-p.Approvals) + " more approver(s)"
		}
		p.WhyNot += "."
		if camp.State == approval.StatePendingApproval {
			hint, err := s.approverHint(ctx, mustActor(c), camp)
			if err != nil {
				return p, err
			}
			p.WhyNot += " " + hint
		}
	default:
		return p, err
	}
	if p.TestSend, err = s.testSendForm(ctx, mustActor(c), camp, d.TargetCount, "approval"); err != nil {
		return p, err
	}
	// The samples are of people this version will mail: not those an
	// earlier version already sent to, nor the suppressed.
	sample, err := plan.SendSample(ctx, s.cfg.Pool, d.ListID, sampleCount, plan.DefaultSampleWindow)
	if err != nil {
		return p, err
	}
	for _, ordinal := range sample {
		p.Samples = append(p.Samples, s.previewOf(c, camp, d, "", ordinal))
	}
	p.SampleNote = sampleNote(len(sample), d.TargetCount)
	// The warnings the proposer was shown at submit (plan.Check, the
	// submission's own check), for the approver to weigh.
	if d.TargetCount > 0 {
		r, err := plan.Check(ctx, s.cfg.Pool, d.Content())
		if err != nil {
			if _, ok := fieldErrors(err); !ok {
				return p, err
			}
		}
		p.EmptyWarnings = emptyWarnings(r)
	}
	p.After, _ = strconv.Atoi(c.QueryParam("after"))
	p.After = max(p.After, 0)
	if p.Targets, err = draftTargets(ctx, s.cfg.Pool, d.ListID, p.After, approvalPageSize+1); err != nil {
		return p, err
	}
	if len(p.Targets) > approvalPageSize {
		p.Targets = p.Targets[:approvalPageSize]
		p.Next = p.Targets[approvalPageSize-1].Ordinal
	}
	if p.LeftOut, err = s.cfg.Approval.LeftOutAtImport(ctx, camp); err != nil {
		return p, err
	}
	if p.SuppressedNow, err = suppression.InList(ctx, s.cfg.Pool, d.ListID); err != nil {
		return p, err
	}
	if p.Rejected, err = s.rejection(ctx, camp); err != nil {
		return p, err
	}
	p.Diffs, err = s.approvalDiffs(ctx, camp)
	return p, err
}

// sampleNote says which targets the approval page's samples are, or why
// there are fewer than sampleCount.
func sampleNote(found, targets int) string {
	switch {
	case targets == 0:
		return ""
	case found == 0:
		return "No sample: none of the first " + view.Targets(min(targets, plan.DefaultSampleWindow)) + " will be sent by this version (an earlier version sent them, or their addresses are suppressed)."
	case found < min(sampleCount, targets) && targets <= plan.DefaultSampleWindow:
		return "Only " + view.Targets(found) + " of the list will be sent by this version; the others were sent by an earlier version or are suppressed."
	case found < min(sampleCount, targets):
		return "Only " + view.Targets(found) + " of the first " + view.Targets(plan.DefaultSampleWindow) + " will be sent by this version; the others were sent by an earlier version or are suppressed."
	}
	return "The first targets this version will send: those an earlier version already sent to, and suppressed addresses, are passed by."
}

func (s *Server) handleApproval(c echo.Context) error {
	camp, err := s.campaignOf(c)
	if err != nil {
		return err
	}
	p, err := s.approvalPage(c, camp)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, view.Approval(p))
}

// handleApprove records an approval of the hash the page showed; the
// service refuses it (409) when the draft changed since.
func (s *Server) handleApprove(c echo.Context) error {
	id := c.Param("id")
	shown := strings.TrimSpace(c.FormValue("plan_hash"))
	res, err := s.cfg.Approval.Approve(c.Request().Context(), mustActor(c), id, shown)
	if err != nil {
		return err
	}
	if res.Campaign.State == approval.StatePendingApproval {
		return redirect(c, "/campaigns/"+id+"/approval", "approval-recorded")
	}
	return redirect(c, "/campaigns/"+id+"/run", "approved")
}

func (s *Server) handleReject(c echo.Context) error {
	id := c.Param("id")
	f := readReasonForm(c)
	if err := f.Validate(); err != nil {
		return err
	}
	if _, err := s.cfg.Approval.Reject(c.Request().Context(), mustActor(c), id, f.Reason); err != nil {
		return err
	}
	return redirect(c, "/campaigns/"+id+"/draft", "rejected")
}
