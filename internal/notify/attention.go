package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
)

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
