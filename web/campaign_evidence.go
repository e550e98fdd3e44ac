package web

// Evidence for the unknowns: a person uploads a provider's event export
// on the run page (or asks for the provider events already received);
// Onceplan proposes a resolution for each unknown target the evidence
// names (inbound.ReadExport, inbound.Propose), shows them, and resolves
// only the rows the person then selects and confirms — one
// approval.ResolveEffect per target, with a reason naming the event.
// Uploading changes nothing; the proposals are kept for the uploader in
// the server's memory (shownResult) until they confirm or it expires.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// evidenceUploadLimit bounds the upload: the export's own limit plus the
// form around it.
const evidenceUploadLimit = "65M"

// evidenceGone is the answer when an upload's proposals are no longer kept.
const evidenceGone = "These proposals are no longer kept (they last 30 minutes, and a restart forgets them): upload the evidence again on the run page."

// maxUnknowns bounds the unknown targets one proposal considers.
const maxUnknowns = 100_000

// evidenceSet is an upload's proposals, kept for the page that shows them
// and for the confirmation.
type evidenceSet struct {
	planID    int64
	sources   []string
	events    int
	ignored   int
	unmatched int
	unknown   int
	proposals []inbound.Proposal
	byOrdinal map[int]int // index into proposals
}

// unknownTargets lists every unknown target of a plan, by ordinal, from
// the read model.
func unknownTargets(ctx context.Context, db onceplan.DB, pl plan.Plan) ([]inbound.Unknown, error) {
	var (
		out   []inbound.Unknown
		after string
	)
	for {
		page, err := audit.QueryTargets(ctx, db, audit.TargetQuery{
			ListID: pl.ListID, Count: pl.TargetCount, State: "unknown", After: after, Limit: 1000, StateCount: -1,
		})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Rows {
			u := inbound.Unknown{Ordinal: r.Ordinal, Target: r.Target, Key: r.Key, Epoch: r.Epoch, Receipt: r.Receipt}
			if r.FirstAt != nil {
				u.FirstAt = *r.FirstAt
			}
			out = append(out, u)
		}
		if page.Next == "" || len(out) >= maxUnknowns {
			return out, nil
		}
		after = page.Next
	}
}

// evidenceCampaign is the campaign and plan of an evidence route, refused
// unless the user may resolve its targets now.
func (s *Server) evidenceCampaign(c echo.Context) (approval.Campaign, plan.Plan, error) {
	camp, err := s.campaignOf(c)
	if err != nil {
		return camp, plan.Plan{}, err
	}
	if err := approval.Allowed(mustActor(c), camp, auth.ActionResolve); err != nil {
		return camp, plan.Plan{}, err
	}
	pl, err := s.planOf(c.Request().Context(), camp)
	return camp, pl, err
}

// handleEvidenceUpload reads the export and shows the proposals (303 to
// the proposal page). It changes nothing.
func (s *Server) handleEvidenceUpload(c echo.Context) error {
	camp, pl, err := s.evidenceCampaign(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var proofs []inbound.Proof
	set := &evidenceSet{planID: pl.ID}
	fh, ferr := c.FormFile("evidence")
	received := c.FormValue("received") != ""
	switch {
	case ferr == nil:
		f, err := fh.Open()
		if err != nil {
			return err
		}
		defer f.Close()
		ex, err := inbound.ReadExport(f, fh.Filename)
		if err != nil {
			var ee *inbound.ExportError
			if errors.As(err, &ee) {
				return &onceplan.FieldError{Field: "evidence", Reason: ee.Error()}
			}
			return err
		}
		proofs = ex.Proofs
		set.sources, set.events, set.ignored = append(set.sources, fh.Filename), ex.Events, ex.Ignored
	case !errors.Is(ferr, http.ErrMissingFile) && !errors.Is(ferr, http.ErrNotMultipart):
		return ferr
	case !received:
		return &onceplan.FieldError{Field: "evidence", Reason: "choose an event export to upload, or tick the provider events already received"}
	}
	unknowns, err := unknownTargets(ctx, s.cfg.Pool, pl)
	if err != nil {
		return err
	}
	if received {
		keys := make([]string, len(unknowns))
		for i, u := range unknowns {
			keys[i] = u.Key
		}
		got, err := inbound.ReceivedProofs(ctx, s.cfg.Pool, keys)
		if err != nil {
			return err
		}
		proofs = append(proofs, got...)
		set.sources = append(set.sources, "the provider events already received")
		set.events += len(got)
	}
	set.unknown = len(unknowns)
	set.proposals = inbound.Propose(unknowns, proofs)
	set.byOrdinal = map[int]int{}
	for i, p := range set.proposals {
		set.byOrdinal[p.Ordinal] = i
	}
	set.unmatched = len(proofs) - matched(set.proposals, proofs)
	return s.redirectShowing(c, "/campaigns/"+camp.ID+"/evidence", "", shownResult{campaign: camp.ID, evidence: set})
}

// matched counts the proofs some proposal rests on (its deciding one and
// the others agreeing), to say how many were about no unknown target.
func matched(props []inbound.Proposal, proofs []inbound.Proof) int {
	n := 0
	for _, p := range props {
		n += 1 + p.Others
	}
	return min(n, len(proofs))
}

// evidenceFor is the request's proposals (?shown= or the form's shown).
func (s *Server) evidenceFor(c echo.Context, id string, camp approval.Campaign) (*evidenceSet, bool) {
	r, ok := s.shown.get(id, s.cfg.Now())
	if !ok || r.user != mustActor(c).UserID || r.campaign != camp.ID || r.evidence == nil || r.evidence.planID != camp.PlanID {
		return nil, false
	}
	return r.evidence, true
}

// handleEvidence shows the proposals of an upload.
func (s *Server) handleEvidence(c echo.Context) error {
	camp, _, err := s.evidenceCampaign(c)
	if err != nil {
		return err
	}
	id := c.QueryParam("shown")
	set, ok := s.evidenceFor(c, id, camp)
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, evidenceGone)
	}
	v := view.EvidenceView{Page: s.page(c, camp.Name+": evidence", "campaigns"), Campaign: campaignView(camp), Shown: id,
		Sources: set.sources, Events: set.events, Ignored: set.ignored, Unmatched: set.unmatched, Unknown: set.unknown}
	for _, p := range set.proposals {
		v.Proposals = append(v.Proposals, view.EvidenceRow{Ordinal: p.Ordinal, Target: p.Target, Outcome: string(p.Outcome),
			Evidence: p.Reason(), ByAddress: p.ByAddress})
	}
	return s.render(c, http.StatusOK, view.Evidence(v))
}

// handleEvidenceConfirm resolves the selected proposals, each as the
// evidence says, one approval.ResolveEffect per target. A target that is
// no longer unknown (resolved meanwhile) is left as it is.
func (s *Server) handleEvidenceConfirm(c echo.Context) error {
	camp, pl, err := s.evidenceCampaign(c)
	if err != nil {
		return err
	}
	id := c.FormValue("shown")
	set, ok := s.evidenceFor(c, id, camp)
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, evidenceGone)
	}
	form, err := c.FormParams()
	if err != nil {
		return err
	}
	var chosen []int
	for _, v := range form["ordinal"] {
		n, err := strconv.Atoi(v)
		if _, ok := set.byOrdinal[n]; err != nil || !ok {
			return &onceplan.FieldError{Field: "ordinal", Reason: "target " + strconv.Quote(v) + " is not one of the proposals"}
		}
		if !slices.Contains(chosen, n) {
			chosen = append(chosen, n)
		}
	}
	if len(chosen) == 0 {
		return &onceplan.FieldError{Field: "ordinal", Reason: "select at least one proposal to resolve"}
	}
	ctx := c.Request().Context()
	a := mustActor(c)
	skipped := 0
	for _, n := range chosen {
		p := set.proposals[set.byOrdinal[n]]
		_, err := s.cfg.Approval.ResolveEffect(ctx, a, camp.ID, p.Key, p.Outcome, p.Reason())
		switch {
		case err == nil:
		case errors.Is(err, onceplan.ErrForbidden):
			return err
		case errors.Is(err, onceplan.ErrNotFound) || errors.Is(err, ledger.ErrIllegalTransition):
			skipped++ // resolved (or settled) meanwhile: left as it is
		default:
			s.counts.Forget(pl.ListID)
			return err
		}
	}
	s.counts.Forget(pl.ListID)
	s.shown.take(id, s.cfg.Now())
	flash := "evidence-resolved"
	if skipped > 0 {
		flash = "evidence-partial"
	}
	return redirect(c, "/campaigns/"+camp.ID+"/run", flash)
}
