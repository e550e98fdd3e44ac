package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// maxRawShown bounds how much of one raw provider response the page shows.
const maxRawShown = 64 << 10

// targetOf reads the campaign, its plan and the target named by the route.
func (s *Server) targetOf(c echo.Context) (approval.Campaign, plan.Plan, targetRow, error) {
	camp, err := s.campaignOf(c)
	if err != nil {
		return camp, plan.Plan{}, targetRow{}, err
	}
	ctx := c.Request().Context()
	pl, err := s.planOf(ctx, camp)
	if err != nil {
		return camp, pl, targetRow{}, err
	}
	ordinal, err := strconv.Atoi(c.Param("ordinal"))
	if err != nil || ordinal < 1 {
		return camp, pl, targetRow{}, echo.NewHTTPError(http.StatusNotFound, "no such target")
	}
	t, err := targetByOrdinal(ctx, s.cfg.Pool, pl.ListID, ordinal)
	return camp, pl, t, err
}

func (s *Server) handleTarget(c echo.Context) error {
	camp, _, t, err := s.targetOf(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	store := ledger.NewStore(s.cfg.Pool)
	history, err := store.History(ctx, ledger.Key(t.Key))
	if err != nil {
		return err
	}
	// Who may decide is the campaign lifecycle's answer (approval.Allowed);
	// which decision fits is the target's state.
	a := mustActor(c)
	may := func(action auth.Action) bool { return approval.Allowed(a, camp, action) == nil }
	p := view.TargetPage{
		Page: s.page(c, t.Target, "campaigns"), Campaign: campaignView(camp), Row: t.TargetRow, Vars: t.Vars,
		CanOperate:   may(auth.ActionResolve),
		CanResolve:   may(auth.ActionResolve) && t.State == "unknown",
		CanSupersede: may(auth.ActionSupersede) && t.State == "done",
		CanRevoke:    may(auth.ActionRevoke) && (t.State == "done" || t.State == "stranded"),
	}
	for _, e := range history {
		a := view.Attempt{
			ID: e.ID, Epoch: e.Epoch, Attempt: e.Attempt, State: string(e.State), Owner: e.Owner, JobID: e.JobID,
			Receipt: e.Receipt, Reason: e.Reason, ResolvedBy: e.ResolvedBy, Resolution: e.Resolution,
			RevokedBy: e.RevokedBy, RevokeReason: e.RevokeReason, Created: e.CreatedAt, Updated: e.UpdatedAt, Settled: e.SettledAt,
		}
		resps, err := store.Responses(ctx, e.ID)
		if err != nil {
			return err
		}
		for _, r := range resps {
			body := r.Body
			if len(body) > maxRawShown {
				body = body[:maxRawShown]
			}
			// Escaped by templ on output; invalid UTF-8 shown as U+FFFD.
			text := strings.ToValidUTF8(string(body), "\uFFFD")
			if len(r.Body) > maxRawShown {
				text += "\n… (" + strconv.Itoa(len(r.Body)-maxRawShown) + " more bytes)"
			}
			kind := string(r.Kind)
			if r.Call != 0 {
				// One answer for the whole call: say which message is this one.
				kind += fmt.Sprintf(" (batch call %d: message %d of its answer)", r.Call, r.Position+1)
			}
			a.Responses = append(a.Responses, view.Response{Kind: kind, At: r.CreatedAt, Body: text, Size: len(r.Body)})
		}
		p.Attempts = append(p.Attempts, a)
	}
	if p.Bumps, err = bumps(ctx, store, t.Key); err != nil {
		return err
	}
	events, err := inbound.EventsAbout(ctx, s.cfg.Pool, t.Key, t.Target)
	if err != nil {
		return err
	}
	for _, e := range events {
		about := "this target's message"
		switch {
		case e.Key == "":
			about = "the address (no message of ours named)"
		case e.Key != t.Key:
			about = "another campaign's message to the address"
		}
		p.Events = append(p.Events, view.ProviderEvent{Kind: string(e.Kind), Type: string(e.Type), Epoch: e.Epoch,
			Detail: e.Detail, MessageID: e.MessageID, At: e.At, Received: e.CreatedAt, About: about, Mine: e.Key == t.Key})
	}
	if entry, ok, err := suppression.Lookup(ctx, s.cfg.Pool, t.Target); err != nil {
		return err
	} else if ok {
		rows, err := suppressionRows(ctx, s.cfg.Pool, []suppression.Entry{entry})
		if err != nil {
			return err
		}
		p.AddressSuppressed = &rows[0]
	}
	return s.render(c, http.StatusOK, view.Target(p))
}

func targetPath(camp approval.Campaign, t targetRow) string {
	return "/campaigns/" + camp.ID + "/targets/" + strconv.Itoa(t.Ordinal)
}

// handleResolve records a person's verdict on an unknown target.
func (s *Server) handleResolve(c echo.Context) error {
	camp, pl, t, err := s.targetOf(c)
	if err != nil {
		return err
	}
	f := readReasonForm(c)
	if err := f.Validate(); err != nil {
		return err
	}
	outcome := ledger.Outcome(c.FormValue("outcome"))
	if outcome != ledger.Delivered && outcome != ledger.NotDelivered {
		return &onceplan.FieldError{Field: "outcome", Reason: "choose delivered or not delivered"}
	}
	if _, err := s.cfg.Approval.ResolveEffect(c.Request().Context(), mustActor(c), camp.ID, t.Key, outcome, f.Reason); err != nil {
		return err
	}
	s.counts.Forget(pl.ListID)
	return redirect(c, targetPath(camp, t), "resolved")
}

// handleSupersede moves a done target's key to its next epoch so that it
// gets one deliberate second effect: the person must type the target and
// a reason; approval.SupersedeEffect bumps, audits and requeues in one
// transaction.
func (s *Server) handleSupersede(c echo.Context) error {
	camp, pl, t, err := s.targetOf(c)
	if err != nil {
		return err
	}
	f := readReasonForm(c)
	if err := f.Validate(); err != nil {
		return err
	}
	if _, err := s.cfg.Approval.SupersedeEffect(c.Request().Context(), mustActor(c), camp.ID, t.Key, c.FormValue("confirm_target"), f.Reason); err != nil {
		return err
	}
	s.counts.Forget(pl.ListID)
	return redirect(c, targetPath(camp, t), "superseded")
}

// handleRevoke withdraws a done (or stranded) effect, with a reason.
func (s *Server) handleRevoke(c echo.Context) error {
	camp, pl, t, err := s.targetOf(c)
	if err != nil {
		return err
	}
	f := readReasonForm(c)
	if err := f.Validate(); err != nil {
		return err
	}
	if _, err := s.cfg.Approval.RevokeEffect(c.Request().Context(), mustActor(c), camp.ID, t.Key, f.Reason); err != nil {
		return err
	}
	s.counts.Forget(pl.ListID)
	return redirect(c, targetPath(camp, t), "revoked")
}
