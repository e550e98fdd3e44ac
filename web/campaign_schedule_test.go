package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/suppression"
)

// newCampaignFields are the new-campaign form's fields for a plain
// campaign on the test's provider.
func newCampaignFields(extra map[string]string) map[string]string {
	f := map[string]string{"name": "Spring sale", "provider": "outbox", "required_approvals": "1",
		"from": "Sales <sales@example.com>", "subject": "Hello {{.first_name}}", "text": "Dear {{.first_name}}"}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// TestScheduleOnTheForm: the new-campaign form takes when the campaign
// starts — at a time (UTC), or as soon as it is approved — refuses a time
// it cannot read or one given without choosing it, naming the field; the
// campaign's pages say when it starts, and once approved it starts by
// itself when its time comes.
func TestScheduleOnTheForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p := b.as["proposer"]

	d := parse(t, p.get("/campaigns/new"))
	_, checked := tid(d, "field-start-manual").Attr("checked")
	require.True(t, checked, "an operator starts it, by default")

	for field, extra := range map[string]map[string]string{
		"scheduled_at": {"start": "at", "scheduled_at": "next Tuesday"},
		"start":        {"start": "whenever"},
	} {
		rec := p.upload("/campaigns", newCampaignFields(extra), csvOf(2))
		require.Equal(t, http.StatusUnprocessableEntity, rec.Code, field)
		require.Equal(t, 1, tid(parse(t, rec), "error-"+field).Length(), field)
	}
	rec := p.upload("/campaigns", newCampaignFields(map[string]string{"scheduled_at": "2030-01-31T09:00"}), csvOf(2))
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error-scheduled_at").Text(), `choose "at a time"`)

	at := time.Now().UTC().Add(time.Hour).Truncate(time.Minute)
	rec = p.upload("/campaigns", newCampaignFields(map[string]string{"start": "at", "scheduled_at": at.Format("2006-01-02T15:04")}), csvOf(2))
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	id := strings.TrimPrefix(strings.Split(rec.Header().Get("Location"), "/draft")[0], "/campaigns/")
	c := b.campaign(id)
	require.NotNil(t, c.ScheduledAt)
	require.True(t, at.Equal(*c.ScheduledAt), "%v, want %v", c.ScheduledAt, at)
	require.False(t, c.StartOnApproval)
	d = parse(t, p.get("/campaigns/"+id+"/draft"))
	require.Equal(t, "starts by itself at "+at.Format("2006-01-02 15:04:05")+" UTC, once approved", tid(d, "starts").Text())

	// Approved, it waits for its time, then starts by itself.
	_, err := b.svc.Submit(ctx, p.actor, id)
	require.NoError(t, err)
	_, err = b.svc.Approve(ctx, b.as["approver"].actor, id, b.hash(c))
	require.NoError(t, err)
	started, err := b.svc.StartDue(ctx)
	require.NoError(t, err)
	require.Empty(t, started, "not before its time")
	require.Equal(t, approval.StateApproved, b.campaign(id).State)
	b.svc.Now = func() time.Time { return at.Add(time.Second) }
	started, err = b.svc.StartDue(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{id}, started)
	require.Equal(t, approval.StateRunning, b.campaign(id).State)

	// As soon as it is approved.
	rec = p.upload("/campaigns", newCampaignFields(map[string]string{"start": "approval"}), csvOf(2))
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	id = strings.TrimPrefix(strings.Split(rec.Header().Get("Location"), "/draft")[0], "/campaigns/")
	require.True(t, b.campaign(id).StartOnApproval)
	require.Nil(t, b.campaign(id).ScheduledAt)
	require.Equal(t, "starts as soon as it is approved", tid(parse(t, p.get("/campaigns/"+id+"/draft")), "starts").Text())
}

// TestCloneACampaign: "clone" opens the new-campaign form filled from a
// campaign's current version; the new draft imports that version's list
// again, as an upload — an address suppressed since is left out and the
// import report says so — and its history names where it came from. The
// source is untouched.
func TestCloneACampaign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	src, _ := b.started(campaignOpts{Targets: csvOf(4)})
	_, _, err := suppression.Add(ctx, b.pool, suppression.AddParams{Address: "user0002@example.com", Reason: suppression.Unsubscribed,
		Source: suppression.FromActor, Actor: "ops@example.com"})
	require.NoError(t, err)

	p := b.as["proposer"]
	d := parse(t, p.get("/campaigns"))
	href := d.Find(`[data-testid="campaign-row"][data-id="`+src.ID+`"] [data-testid="clone"]`).AttrOr("href", "")
	require.Equal(t, "/campaigns/new?from="+src.ID, href)
	require.Equal(t, 0, tid(parse(t, b.as["viewer"].get("/campaigns")), "clone").Length(), "only proposers clone")

	d = parse(t, p.get(href))
	form := map[string]string{}
	d.Find(`[data-testid="new-campaign-form"] input[name], [data-testid="new-campaign-form"] textarea[name]`).Each(func(_ int, s *goquerySelection) {
		name := s.AttrOr("name", "")
		switch {
		case name == "csrf_token" || name == "form_token":
		case s.Is("textarea"):
			form[name] = s.Text()
		case s.AttrOr("type", "") == "radio" || s.AttrOr("type", "") == "checkbox":
			if _, checked := s.Attr("checked"); checked {
				form[name] = s.AttrOr("value", "")
			}
		default:
			form[name] = s.AttrOr("value", "")
		}
	})
	require.Equal(t, "Invoice reminder (copy)", form["name"])
	require.Equal(t, "Hello {{.first_name}}", form["subject"])
	require.Equal(t, src.ID, form["copy_list_of"])
	require.Contains(t, tid(d, "copy-source").Text(), "4 targets")
	form["provider"] = "outbox"

	rec := p.upload("/campaigns", form, "")
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	d = parse(t, p.follow(rec))
	require.Equal(t, "Invoice reminder (copy)", tid(d, "campaign-name").Text())
	require.Equal(t, "3", tid(d, "import-accepted").Text())
	require.Equal(t, "1", tid(d, "import-suppressed").Text(), "the suppression list applies at import, as to an upload")
	require.Equal(t, "3", tid(d, "target-count").Text())
	created := d.Find(`[data-testid="history"] [data-testid="event"][data-action="create"] [data-testid="event-summary"]`).Text()
	require.Contains(t, created, `from campaign "Invoice reminder", importing the list of its version 1`)

	require.Equal(t, 4, b.campaignTargets(src.ID), "the source keeps its list")
	require.Equal(t, approval.StateRunning, b.campaign(src.ID).State)
}
