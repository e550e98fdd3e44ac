package web

import (
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// uploadEvidence posts the run page's evidence form.
func (c *client) uploadEvidence(path, name, body string, received bool) *httptest.ResponseRecorder {
	var buf strings.Builder
	w := multipart.NewWriter(&buf)
	w.WriteField(csrfField, c.csrf)
	if received {
		w.WriteField("received", "1")
	}
	if name != "" {
		fw, err := w.CreateFormFile("evidence", name)
		require.NoError(c.t, err)
		io.WriteString(fw, body)
	}
	require.NoError(c.t, w.Close())
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(buf.String()))
	req.Header.Set("Content-Type", w.FormDataContentType())
	return c.do(req)
}

// sesLine is one SES event publishing record (as Firehose writes them) for
// a message we sent with messageID to addr.
func sesLine(event, addr, messageID, extra string) string {
	return fmt.Sprintf(`{"eventType":%q,"mail":{"timestamp":"2026-12-01T10:00:00.000Z","messageId":"0100018c-ses-%s","destination":[%q],`+
		`"headers":[{"name":"To","value":%q},{"name":"Message-ID","value":%q}]}%s}`, event, event, addr, addr, messageID, extra)
}

func (b *bundle) effectState(key string) ledger.Effect {
	b.t.Helper()
	e, err := ledger.NewStore(b.pool).Current(context.Background(), ledger.Key(key))
	require.NoError(b.t, err)
	return e
}

func addressOf(p plan.Plan, ordinal int) string { return fmt.Sprintf("user%04d@example.com", ordinal) }

// TestEvidenceProposesThenResolvesTheSelected is the "done means":
// a planted set of unknowns, an export that says some were delivered and
// some not and leaves one out; the upload proposes exactly per the file
// (plus the webhook event already received), changes nothing; confirming
// some resolves exactly those as the file says, the rest stay unknown.
func TestEvidenceProposesThenResolvesTheSelected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	camp, p := b.started(campaignOpts{Targets: csvOf(6)})
	keys := map[int]string{}
	for i := 1; i <= 5; i++ {
		b.effect(p, i, ledger.StateUnknown, "")
		keys[i] = b.keyOf(p, i)
	}
	b.effect(p, 6, ledger.StateDone, "250 ok")
	keys[6] = b.keyOf(p, 6)
	mid := func(i int) string { return provider.MessageID(keys[i], 0) }

	// 5: a bounce already received at /webhooks, tied to its effect.
	_, err := inbound.Record(context.Background(), b.pool, []inbound.Event{{Kind: inbound.Generic, ProviderEventID: "evt-5",
		Type: inbound.SoftBounce, Address: addressOf(p, 5), MessageID: mid(5), Detail: "soft_bounce", Raw: []byte(`{"id":"evt-5"}`)}})
	require.NoError(t, err)

	export := strings.Join([]string{
		sesLine("Delivery", addressOf(p, 1), mid(1), `,"delivery":{"timestamp":"2026-12-01T10:00:02.000Z","recipients":["`+addressOf(p, 1)+`"],"smtpResponse":"250 2.6.0 Message received"}`),
		sesLine("Reject", addressOf(p, 2), mid(2), `,"reject":{"reason":"Bad content"}`),
		// 3: SendGrid dropped it, naming the effect id as a custom argument.
		fmt.Sprintf(`{"event":"dropped","email":%q,"timestamp":1764583200,"reason":"Bounced Address","onceplan_effect":%q}`, addressOf(p, 3), provider.EffectID(keys[3], 0)),
		// 4: only an open: proves nothing.
		sesLine("Open", addressOf(p, 4), mid(4), `,"open":{"timestamp":"2026-12-01T10:05:00.000Z"}`),
		// 6 is done already: not an unknown, not proposed.
		sesLine("Delivery", addressOf(p, 6), mid(6), ""),
	}, "\n") + "\n"

	op := b.as["operator"]
	run := "/campaigns/" + camp.ID + "/run"
	d := parse(t, op.get(run))
	require.Equal(t, 1, tid(d, "evidence-form").Length(), "an operator is offered the upload while there are unknowns")
	d = parse(t, b.as["viewer"].get(run))
	require.Zero(t, tid(d, "evidence-form").Length(), "a viewer may not resolve: no upload")

	rec := op.uploadEvidence("/campaigns/"+camp.ID+"/evidence", "ses-events.jsonl", export, true)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	loc := rec.Header().Get("Location")
	require.True(t, strings.HasPrefix(loc, "/campaigns/"+camp.ID+"/evidence?shown="), loc)

	// Nothing changed by the upload.
	for i := 1; i <= 5; i++ {
		require.Equal(t, ledger.StateUnknown, b.effectState(keys[i]).State, "target %d", i)
	}

	page := op.get(loc)
	require.Equal(t, http.StatusOK, page.Code, page.Body.String())
	d = parse(t, page)
	got := map[string]string{}
	evidence := map[string]string{}
	tid(d, "proposal").Each(func(_ int, s *goquerySelection) {
		target := s.Find(`[data-testid="proposal-target"]`).Text()
		got[target], _ = s.Find(`[data-testid="proposal-outcome"]`).Attr("data-outcome")
		evidence[target] = s.Find(`[data-testid="proposal-evidence"]`).Text()
	})
	require.Equal(t, map[string]string{
		addressOf(p, 1): "delivered", addressOf(p, 2): "not_delivered", addressOf(p, 3): "not_delivered", addressOf(p, 5): "delivered",
	}, got)
	require.Contains(t, evidence[addressOf(p, 1)], "SES Delivery, message id "+mid(1))
	require.Contains(t, evidence[addressOf(p, 1)], "ses-events.jsonl line 1")
	require.Contains(t, evidence[addressOf(p, 5)], "received webhook event")
	require.Contains(t, tid(d, "evidence-summary").Text(), "4 of the 5 unknown targets")

	shown := strings.TrimPrefix(loc, "/campaigns/"+camp.ID+"/evidence?shown=")
	confirm := "/campaigns/" + camp.ID + "/evidence/confirm"
	form := func() url.Values { return url.Values{"shown": {shown}, "ordinal": {"1", "2"}} }

	// A viewer cannot confirm, nor another operator with someone else's
	// proposals.
	require.Equal(t, http.StatusForbidden, b.as["viewer"].post(confirm, form()).Code)
	require.Equal(t, http.StatusForbidden, b.as["viewer"].get(loc).Code)
	other := b.user("oli2@example.com", "operator")
	r2 := other.post(confirm, form())
	require.Equal(t, http.StatusNotFound, r2.Code, r2.Body.String())
	// A target that is not a proposal is refused, resolving nothing.
	require.Equal(t, http.StatusBadRequest, op.post(confirm, url.Values{"shown": {shown}, "ordinal": {"1", "4"}}).Code)
	for i := 1; i <= 5; i++ {
		require.Equal(t, ledger.StateUnknown, b.effectState(keys[i]).State, "target %d", i)
	}

	rec = op.post(confirm, form())
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, run+"?flash=evidence-resolved", rec.Header().Get("Location"))

	e1 := b.effectState(keys[1])
	require.Equal(t, ledger.StateDone, e1.State)
	require.Equal(t, "user:operator@example.com", e1.ResolvedBy)
	require.Contains(t, e1.Resolution, "evidence: SES Delivery, message id "+mid(1)+", to "+addressOf(p, 1)+", at 2026-12-01 10:00:02 UTC")
	// 2 was resolved as not delivered: its attempt failed, the key is
	// free (the resume queues it once more).
	var failed string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT resolution FROM effect WHERE key = $1 AND state = 'failed'`, keys[2]).Scan(&failed))
	require.Contains(t, failed, "evidence: SES Reject")
	for _, i := range []int{3, 4, 5} {
		require.Equal(t, ledger.StateUnknown, b.effectState(keys[i]).State, "target %d stays unknown", i)
	}
	require.Equal(t, ledger.StateDone, b.effectState(keys[6]).State)
}

// TestEvidenceMalformedFileNamesItsLine: a bad export is refused in one
// sentence naming the file's line, and nothing is proposed or changed.
func TestEvidenceMalformedFileNamesItsLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	camp, p := b.started(campaignOpts{Targets: csvOf(2)})
	d := parse(t, b.as["operator"].get("/campaigns/"+camp.ID+"/run"))
	require.Zero(t, tid(d, "evidence-form").Length(), "no unknowns: no upload offered")
	b.effect(p, 1, ledger.StateUnknown, "")
	body := sesLine("Delivery", addressOf(p, 1), provider.MessageID(b.keyOf(p, 1), 0), "") + "\n{\"eventType\": \"Delivery\",, }\n"
	rec := b.as["operator"].uploadEvidence("/campaigns/"+camp.ID+"/evidence", "bad.jsonl", body, false)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "bad.jsonl line 2: this is not valid JSON")
	require.Equal(t, ledger.StateUnknown, b.effectState(b.keyOf(p, 1)).State)

	// Neither a file nor the received events: say what to do.
	rec = b.as["operator"].uploadEvidence("/campaigns/"+camp.ID+"/evidence", "", "", false)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "choose an event export to upload")
}
