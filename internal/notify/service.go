package notify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/plan"
)

// Defaults of Config.
const (
	// DefaultWindow: at most one attention message per campaign per
	// window.
	DefaultWindow = 5 * time.Minute
	// WaitPerWindow: the wait defaults to the window divided by this.
	WaitPerWindow = 10
)

// AccountPath is the page where a signed-in user chooses which events
// reach them (package web serves it); messages link to it.
const AccountPath = "/account/notifications"

// Config is what a Service needs.
type Config struct {
	DB        *pgxpool.Pool
	Notifiers *Registry
	// PublicURL is the base of the messages' links (--public-url).
	// Default suppression.DefaultPublicURL.
	PublicURL string
	// Window: at most one attention message per campaign per window.
	// Default DefaultWindow.
	Window time.Duration
	// Wait: a growth of a campaign's unknown, stranded or failed targets
	// gathers this long before its message goes out, so that a burst
	// arrives as one message with its whole count. Default
	// Window/WaitPerWindow.
	Wait time.Duration
	// FailedForGood counts the targets of campaign c's plan whose attempt
	// failed and that nothing will retry (package jobs knows River's
	// jobs): attention counts only those as failed, not a target whose
	// retry is still queued. Nil: every failed target counts.
	FailedForGood func(ctx context.Context, db onceplan.DB, c approval.Campaign) (int, error)
	// Owner names this process in the attempts it records.
	Owner  string
	Logger *slog.Logger
}

// WithDefaults returns c with its zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.PublicURL = strings.TrimRight(cmp.Or(c.PublicURL, suppression.DefaultPublicURL), "/")
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.Wait = cmp.Or(c.Wait, c.Window/WaitPerWindow)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Service expands events into notifications, delivers them, and scans
// campaigns for targets that need attention. It is safe for concurrent
// use.
type Service struct {
	cfg Config
}

// NewService returns a Service on cfg with its defaults.
func NewService(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.DB == nil:
		return nil, errors.New("notify: a database is required")
	case cfg.Window <= 0 || cfg.Wait < 0:
		return nil, fmt.Errorf("notify: the window (%s) must be positive and the wait (%s) not negative", cfg.Window, cfg.Wait)
	}
	return &Service{cfg: cfg}, nil
}

// Notifiers are the configured notifiers.
func (s *Service) Notifiers() *Registry { return s.cfg.Notifiers }

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

// attention is one notification_attention row.
type attention struct {
	id                        int64
	campaignID                string
	kind                      string
	unknown, stranded, failed int
	at                        time.Time
}

func (a attention) counts() [3]int { return [3]int{a.unknown, a.stranded, a.failed} }

// attentionColumns are the notification_attention columns an attention
// is read from, in the order of attention.dest.
const attentionColumns = `id, campaign_id, kind, unknown, stranded, failed, created_at`

func (a *attention) dest() []any {
	return []any{&a.id, &a.campaignID, &a.kind, &a.unknown, &a.stranded, &a.failed, &a.at}
}

func (s *Service) attentionMessage(ctx context.Context, id int64, users []auth.User) (message, bool, error) {
	var a attention
	err := s.cfg.DB.QueryRow(ctx, `SELECT `+attentionColumns+` FROM notification_attention WHERE id = $1`, id).Scan(a.dest()...)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && a.kind != "notified") {
		return message{}, false, err
	}
	if err != nil {
		return message{}, false, err
	}
	c, err := approval.GetCampaign(ctx, s.cfg.DB, a.campaignID)
	if err != nil {
		return message{}, false, err
	}
	m := message{event: EventAttention, campaign: c, at: a.at, why: "you are an operator"}
	for _, u := range users {
		if !u.Disabled() && EventAttention.For(u.Actor()) {
			m.users = append(m.users, u)
		}
	}
	run := s.cfg.PublicURL + "/campaigns/" + c.ID + "/run"
	var parts, lines []string
	links := map[string]string{}
	url := run // the first state's link, when one has targets
	for _, st := range []struct {
		state string
		n     int
		what  string
	}{
		{"unknown", a.unknown, "the call may or may not have landed: check the provider, then resolve each as delivered or not delivered"},
		{"stranded", a.stranded, "the provider holds them and can never complete them: revoke or resolve each"},
		{"failed", a.failed, "definitely not sent, and no retry is left (a failure after their retries, or a definite rejection): resume the campaign to send them once more"},
	} {
		if st.n == 0 {
			continue
		}
		link := run + "?state=" + st.state
		links[st.state] = link
		if url == run {
			url = link
		}
		parts = append(parts, fmt.Sprintf("%d %s", st.n, st.state))
		lines = append(lines, fmt.Sprintf("%s %s (%s): %s", plural(st.n, "target", "targets"), st.state, st.what, link))
	}
	summary := joinAnd(parts)
	m.subject = fmt.Sprintf("Attention: %s has %s %s", quoted(c.Name), summary, map[bool]string{true: "target", false: "targets"}[a.unknown+a.stranded+a.failed == 1])
	m.paras = []string{
		fmt.Sprintf("The campaign %s (%s) has targets that need a person:", quoted(c.Name), strings.ReplaceAll(string(c.State), "_", " ")),
		strings.Join(lines, "\n"),
		fmt.Sprintf("At most one such message per campaign every %s; the run page shows the counts live: %s", s.cfg.Window, run),
	}
	m.fields = map[string]any{"campaign_id": c.ID, "campaign_name": c.Name, "state": string(c.State),
		"counts": map[string]int{"unknown": a.unknown, "stranded": a.stranded, "failed": a.failed},
		"links":  links, "run_url": run, "url": url, "window_seconds": int(s.cfg.Window / time.Second), "must_act": emails(m.users)}
	return m, true, nil
}

// Result is what one delivery try came to.
type Result int

// Results of Deliver.
const (
	// Delivered: the notifier accepted it (or an earlier try did).
	Delivered Result = iota
	// Retry: it failed this time; try again later.
	Retry
	// GaveUp: it failed for good (an answer no retry changes, or the
	// last try); the attempt says so.
	GaveUp
)

// Deliver tries once to deliver notification id, as the attempt-th try
// (final: the last one allowed), and records the try with the notifier's
// answer. A notification delivered before (a job run twice) is not sent
// again. The error says why it was not delivered.
func (s *Service) Deliver(ctx context.Context, id int64, attempt int, final bool) (Result, error) {
	var (
		event                                    Event
		notifier, kind, recipient, subject, body string
		alreadyDelivered                         bool
	)
	err := s.cfg.DB.QueryRow(ctx, `
		SELECT event, notifier, kind, recipient, subject, body,
		       EXISTS (SELECT 1 FROM notification_attempt a WHERE a.notification_id = n.id AND a.status = 'delivered')
		FROM notification n WHERE id = $1`, id).Scan(&event, &notifier, &kind, &recipient, &subject, &body, &alreadyDelivered)
	if errors.Is(err, pgx.ErrNoRows) {
		return GaveUp, fmt.Errorf("notification %d does not exist", id)
	}
	if err != nil {
		return Retry, err
	}
	if alreadyDelivered {
		return Delivered, nil
	}
	start := time.Now()
	var a answer
	n, ok := s.cfg.Notifiers.Get(notifier)
	switch {
	case !ok:
		a = answer{outcome: temporary, err: fmt.Sprintf("notifier %q is not configured on this process (%s): give every serve and worker the same --notify", notifier, s.cfg.Owner)}
	case n.kind != kind:
		a = answer{outcome: temporary, err: fmt.Sprintf("notifier %q is a %s notifier on this process (%s), but this notification was written for a %s one", notifier, n.kind, s.cfg.Owner, kind)}
	default:
		callCtx, cancel := context.WithTimeout(ctx, n.Timeout())
		if kind == KindWebhook {
			a = n.post(callCtx, id, event, []byte(body), time.Now())
		} else {
			a = n.mail(callCtx, id, recipient, subject, body)
		}
		cancel()
	}
	status, res := StateDelivered, Delivered
	switch {
	case a.outcome == delivered:
	case a.outcome == permanent || final:
		status, res = StateFailed, GaveUp
	default:
		status, res = StateRetrying, Retry
	}
	var httpStatus *int
	if a.httpStatus != 0 {
		httpStatus = &a.httpStatus
	}
	// Recorded even when ctx ended during the call: what the notifier
	// did is kept.
	_, err = s.cfg.DB.Exec(context.WithoutCancel(ctx), `
		INSERT INTO notification_attempt (notification_id, attempt, status, http_status, answer, error, owner, duration_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (notification_id) WHERE status = 'delivered' DO NOTHING`,
		id, attempt, status, httpStatus, clean(a.text), clean(a.err), s.cfg.Owner, time.Since(start).Milliseconds())
	if err != nil {
		return Retry, fmt.Errorf("recording the try of notification %d: %w", id, err)
	}
	if res == Delivered {
		return res, nil
	}
	return res, fmt.Errorf("notification %d through %s: %s", id, notifier, a.err)
}

// NewAttention is a batch of targets that need attention, recorded by
// ScanAttention, to announce.
type NewAttention struct {
	ID         int64
	CampaignID string
}

// ScanAttention looks at every running or paused campaign, and every
// campaign completed lately, and records an attention batch for each
// whose unknown, stranded or failed targets grew since its last message,
// once the growth has gathered for the wait and the window since its
// last message has passed; announce puts each batch's announcement on the
// queue in the transaction that records it. The counts are the UI's
// (approval.CampaignCounts). Two scans at once (two processes) take turns
// per campaign (an advisory lock), so the window holds across processes.
// Nothing is scanned when no notifier carries attention.
func (s *Service) ScanAttention(ctx context.Context, announce func(ctx context.Context, tx pgx.Tx, a NewAttention) error) ([]NewAttention, error) {
	if !slices.ContainsFunc(s.cfg.Notifiers.All(), func(n *Notifier) bool { return n.Carries(EventAttention) }) {
		return nil, nil
	}
	// A campaign completed within two windows and a wait may still owe
	// its last message (its growth came just before it completed).
	recent := 2*s.cfg.Window + s.cfg.Wait
	ids, err := approval.Live(ctx, s.cfg.DB, recent)
	if err != nil {
		return nil, err
	}
	var (
		out  []NewAttention
		errs []error
	)
	for _, id := range ids {
		a, ok, err := s.scanOne(ctx, id, announce)
		if err != nil {
			errs = append(errs, fmt.Errorf("attention of campaign %s: %w", id, err))
		} else if ok {
			out = append(out, a)
		}
	}
	return out, errors.Join(errs...)
}

func (s *Service) scanOne(ctx context.Context, id string, announce func(ctx context.Context, tx pgx.Tx, a NewAttention) error) (NewAttention, bool, error) {
	c, err := approval.GetCampaign(ctx, s.cfg.DB, id)
	if err != nil {
		return NewAttention{}, false, err
	}
	// Counted outside the lock: a large plan's count takes a while.
	counts, err := approval.CampaignCounts(ctx, s.cfg.DB, c)
	if err != nil {
		return NewAttention{}, false, err
	}
	// "Failed after their retries": a failed target whose job will try
	// it again is not news for an operator yet.
	if counts.Failed > 0 && s.cfg.FailedForGood != nil {
		if counts.Failed, err = s.cfg.FailedForGood(ctx, s.cfg.DB, c); err != nil {
			return NewAttention{}, false, err
		}
	}
	now := [3]int{counts.Unknown, counts.Stranded, counts.Failed}
	var (
		out NewAttention
		ok  bool
	)
	err = pgx.BeginFunc(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('onceplan_attention:' || $1, 0))`, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+attentionColumns+` FROM notification_attention WHERE campaign_id = $1 ORDER BY id`, id)
		if err != nil {
			return err
		}
		var all []attention
		var a attention
		if _, err := pgx.ForEachRow(rows, a.dest(), func() error {
			all = append(all, a)
			return nil
		}); err != nil {
			return err
		}
		var dbNow time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
			return err
		}
		kind := s.decide(all, now, dbNow)
		if kind == "" {
			return nil
		}
		var newID int64
		if err := tx.QueryRow(ctx, `INSERT INTO notification_attention (campaign_id, kind, unknown, stranded, failed)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, id, kind, now[0], now[1], now[2]).Scan(&newID); err != nil {
			return err
		}
		if kind != "notified" {
			return nil
		}
		out, ok = NewAttention{ID: newID, CampaignID: id}, true
		return announce(ctx, tx, out)
	})
	return out, ok, err
}

// decide says which row a scan that counts now at time t adds to a
// campaign's attention rows (oldest first): "" for none.
//
// The baseline is the latest notified or baseline row (zeros before
// any). Counts not above it in any state: nothing grew; a fall (or a
// growth seen and gone) becomes the new baseline. Counts above it: the
// growth is observed once; its message is due when it has gathered for
// the wait and the window since the last message has passed.
func (s *Service) decide(rows []attention, now [3]int, t time.Time) string {
	var base, observed, notified *attention
	for i := range rows {
		switch r := &rows[i]; r.kind {
		case "notified":
			base, notified, observed = r, r, nil
		case "baseline":
			base, observed = r, nil
		case "observed":
			if observed == nil {
				observed = r
			}
		}
	}
	var b [3]int
	if base != nil {
		b = base.counts()
	}
	grew := now[0] > b[0] || now[1] > b[1] || now[2] > b[2]
	if !grew {
		if now != b || observed != nil {
			return "baseline"
		}
		return ""
	}
	seen := t
	if observed != nil {
		seen = observed.at
	}
	due := seen.Add(s.cfg.Wait)
	if notified != nil {
		due = maxTime(due, notified.at.Add(s.cfg.Window))
	}
	switch {
	case !t.Before(due):
		return "notified"
	case observed == nil:
		return "observed"
	}
	return ""
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
