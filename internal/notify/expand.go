package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

// Source is what a notification is about: a recorded decision (a trail
// entry's id) or an attention batch (a notification_attention row of kind
// notified). Exactly one is set.
type Source struct {
	Event     int64
	Attention int64
}

// Recorded is a notification written by Expand, to deliver.
type Recorded struct {
	ID       int64
	Notifier string
}

// Expand turns a source into its notifications — one per notifier that
// carries its event and recipient that may get it — and records them in
// one transaction, in which enqueue puts their deliveries on the queue.
// The rows are unique per source, notifier and recipient: a second Expand
// of one source (a retried job) records nothing new and enqueues nothing.
// A source that announces nothing (an action without an event) records
// nothing.
func (s *Service) Expand(ctx context.Context, src Source, enqueue func(ctx context.Context, tx pgx.Tx, recorded []Recorded) error) ([]Recorded, error) {
	m, ok, err := s.message(ctx, src)
	if err != nil || !ok {
		return nil, err
	}
	drafts, err := s.address(ctx, src, m)
	if err != nil || len(drafts) == 0 {
		return nil, err
	}
	var out []Recorded
	err = pgx.BeginFunc(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		var err error
		if out, err = insertNotifications(ctx, tx, drafts); err != nil || len(out) == 0 {
			return err
		}
		return enqueue(ctx, tx, out)
	})
	return out, err
}

// draft is one notification before it is recorded.
type draft struct {
	src       Source
	event     Event
	campaign  string
	notifier  string
	kind      string
	recipient string
	userID    int64
	subject   string
	body      string
}

// address writes m for each notifier and recipient.
func (s *Service) address(ctx context.Context, src Source, m message) ([]draft, error) {
	off, err := optedOut(ctx, s.cfg.DB, m.event, m.users)
	if err != nil {
		return nil, err
	}
	var hookBody string // the same for every webhook
	userBody := m.text(fmt.Sprintf("You get this because %s. Choose which notifications reach you: %s%s", m.why, s.cfg.PublicURL, AccountPath))
	var out []draft
	for _, n := range s.cfg.Notifiers.All() {
		if !n.Carries(m.event) {
			continue
		}
		d := draft{src: src, event: m.event, campaign: m.campaign.ID, notifier: n.name, kind: n.kind, subject: m.subject}
		if n.kind == KindWebhook {
			if hookBody == "" {
				if hookBody, err = m.webhookBody(); err != nil {
					return nil, err
				}
			}
			d.body = hookBody
			out = append(out, d)
			continue
		}
		var seen []string
		if n.users {
			for _, u := range m.users {
				if off[u.ID] || slices.Contains(seen, u.Email) {
					continue
				}
				seen = append(seen, u.Email)
				d.recipient, d.userID, d.body = u.Email, u.ID, userBody
				out = append(out, d)
			}
		}
		fixedBody := m.text(fmt.Sprintf("Sent to this address by Onceplan's notifier %q.", n.name))
		for _, a := range n.to {
			if slices.Contains(seen, a) {
				continue
			}
			seen = append(seen, a)
			d.recipient, d.userID, d.body = a, 0, fixedBody
			out = append(out, d)
		}
	}
	return out, nil
}

// message builds what src says, and whom it is for. ok is false when src
// announces nothing.
func (s *Service) message(ctx context.Context, src Source) (message, bool, error) {
	db := s.cfg.DB
	users, err := auth.ListUsers(ctx, db)
	if err != nil {
		return message{}, false, err
	}
	if src.Attention != 0 {
		return s.attentionMessage(ctx, src.Attention, users)
	}
	byID := make(map[int64]auth.User, len(users))
	for _, u := range users {
		byID[u.ID] = u
	}
	ev, err := approval.GetEvent(ctx, db, src.Event)
	if err != nil {
		return message{}, false, err
	}
	event, ok := EventOf(ev.Action)
	if !ok {
		return message{}, false, nil
	}
	c, err := approval.GetCampaign(ctx, db, ev.CampaignID)
	if err != nil {
		return message{}, false, err
	}
	m := message{event: event, campaign: c, at: ev.CreatedAt, fields: map[string]any{
		"campaign_id": c.ID, "campaign_name": c.Name, "version": ev.Version, "provider": c.Provider,
	}}
	base := s.cfg.PublicURL + "/campaigns/" + c.ID
	enabled := func(ids ...int64) []auth.User {
		var out []auth.User
		for _, id := range ids {
			if u, ok := byID[id]; ok && !u.Disabled() && !slices.ContainsFunc(out, func(o auth.User) bool { return o.ID == id }) {
				out = append(out, u)
			}
		}
		return out
	}
	switch event {
	case EventSubmitted:
		sub, err := approval.SubmissionOf(ctx, db, ev)
		if err != nil {
			return m, false, err
		}
		for _, u := range users {
			if !u.Disabled() && EventSubmitted.For(u.Actor()) && !sub.IsAuthor(u.ID) {
				m.users = append(m.users, u)
			}
		}
		m.why = "you are an approver and did not propose or edit this draft"
		link := base + "/approval"
		m.subject = fmt.Sprintf("Approval needed: %s version %d, %s", quoted(c.Name), ev.Version, plural(sub.TargetCount, "target", "targets"))
		m.paras = []string{
			fmt.Sprintf("%s proposed version %d of the campaign %s: %s through provider %s. It needs %s by someone who did not propose or edit it.",
				who(byID, sub.ProposedBy), ev.Version, quoted(c.Name), plural(sub.TargetCount, "target", "targets"), c.Provider,
				plural(c.RequiredApprovals, "approval", "approvals")),
			"Review it, and approve or reject it: " + link,
		}
		maps.Copy(m.fields, map[string]any{"target_count": sub.TargetCount, "proposer": who(byID, sub.ProposedBy),
			"submitted_by": who(byID, sub.SubmittedBy), "required_approvals": c.RequiredApprovals, "plan_hash": sub.PlanHash,
			"approval_url": link, "url": link, "must_act": emails(m.users)})
	case EventApproved:
		sub, err := approval.SubmissionOf(ctx, db, ev)
		if err != nil {
			return m, false, err
		}
		ids, err := approval.Approvers(ctx, db, c.ID, ev.Version, ev.PlanHash)
		if err != nil {
			return m, false, err
		}
		approvers := make([]string, len(ids))
		for i, id := range ids {
			approvers[i] = who(byID, id)
		}
		m.users = enabled(sub.ProposedBy)
		m.why = "you proposed this version"
		link := base + "/run"
		// As the approval service starts it (approval.Service.Approve,
		// StartDue).
		next := "An operator can start it now."
		switch {
		case c.ScheduledAt != nil && c.ScheduledAt.After(ev.CreatedAt):
			next = "It starts by itself at " + c.ScheduledAt.UTC().Format(time.RFC1123) + "."
		case c.StartOnApproval:
			next = "It started at once, as the campaign asks."
		case c.ScheduledAt != nil:
			next = "Its scheduled time has passed: it starts at the next maintenance round."
		}
		m.subject = fmt.Sprintf("Approved: %s version %d, %s", quoted(c.Name), ev.Version, plural(sub.TargetCount, "target", "targets"))
		m.paras = []string{
			fmt.Sprintf("Version %d of %s reached its quorum of %s (%s) and is frozen: what was approved is what runs. %s",
				ev.Version, quoted(c.Name), plural(len(ids), "approval", "approvals"), joinAnd(approvers), next),
			"The run: " + link,
		}
		maps.Copy(m.fields, map[string]any{"target_count": sub.TargetCount, "proposer": who(byID, sub.ProposedBy), "approvers": approvers,
			"plan_hash": ev.PlanHash, "url": link})
	case EventRejected:
		sub, err := approval.SubmissionOf(ctx, db, ev)
		if err != nil {
			return m, false, err
		}
		m.users = enabled(sub.ProposedBy)
		m.why = "you proposed this version"
		link := base + "/draft"
		m.subject = fmt.Sprintf("Rejected: %s version %d", quoted(c.Name), ev.Version)
		m.paras = []string{
			fmt.Sprintf("%s rejected version %d of %s: %s", who(byID, ev.ActorID), ev.Version, quoted(c.Name), oneLine(ev.Reason)),
			"Change the draft and submit it again: " + link,
		}
		maps.Copy(m.fields, map[string]any{"target_count": sub.TargetCount, "proposer": who(byID, sub.ProposedBy),
			"rejected_by": who(byID, ev.ActorID), "reason": ev.Reason, "url": link})
	case EventAttention:
		// An alert (approval.ActionAlert): what recovery refused, and why.
		for _, u := range users {
			if !u.Disabled() && EventAttention.For(u.Actor()) {
				m.users = append(m.users, u)
			}
		}
		m.why = "you are an operator"
		var d map[string]any
		_ = json.Unmarshal(ev.Detail, &d)
		subject, _ := d["subject"].(string)
		link := base + "/run?state=unknown"
		m.subject = fmt.Sprintf("Attention: %s: recovery stopped and sent nothing", quoted(c.Name))
		m.paras = []string{
			fmt.Sprintf("Recovery of the campaign %s refused to send again what it found recorded, and sent nothing:", quoted(c.Name)),
			oneLine(ev.Reason),
			"The targets concerned are unknown: check the provider, then resolve each as delivered or not delivered: " + link,
		}
		maps.Copy(m.fields, map[string]any{"state": string(c.State), "alert": subject, "reason": ev.Reason,
			"url": link, "must_act": emails(m.users)})
	case EventCompleted:
		run, err := approval.RunBefore(ctx, db, c.ID, ev.CreatedAt)
		if err != nil {
			return m, false, err
		}
		p, err := plan.GetPlan(ctx, db, run.PlanID)
		if err != nil {
			return m, false, err
		}
		metric, err := audit.ForPlan(ctx, db, p.ID)
		if err != nil {
			return m, false, err
		}
		m.users = enabled(p.ProposedBy, run.StartedBy)
		m.why = "you proposed or started this campaign"
		link := base + "/audit"
		headline := metric.Headline()
		m.fields["version"] = p.Version
		m.subject = fmt.Sprintf("Completed: %s, %s", quoted(c.Name), headline)
		m.paras = []string{fmt.Sprintf("The campaign %s (version %d, %s) has nothing left to run: %s.",
			quoted(c.Name), p.Version, plural(p.TargetCount, "target", "targets"), headline)}
		if len(metric.Reasons) > 0 {
			m.paras = append(m.paras, strings.Join(metric.Reasons, "\n"))
		}
		m.paras = append(m.paras, "The audit: "+link)
		maps.Copy(m.fields, map[string]any{"target_count": p.TargetCount, "proposer": who(byID, p.ProposedBy), "started_by": who(byID, run.StartedBy),
			"headline": headline, "holds": metric.Holds, "exactly_once": metric.ExactlyOnce, "approved": metric.Approved,
			"audit": metric, "url": link})
	}
	return m, true, nil
}
