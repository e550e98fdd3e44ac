package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/keyedrate"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// The unsubscribe links (GET|POST /u/{token}) are open to anyone holding
// one: mail providers send the RFC 8058 one-click POST with no cookie, so
// these routes need no session and no CSRF token; the token's MAC is their
// authentication (package unsubscribe). GET only shows the confirm button
// (mail scanners fetch links); POST with List-Unsubscribe=One-Click
// unsubscribes. The body is bounded (unsubscribeBodyLimit) and each client
// address is rate-limited.
const (
	unsubscribeBodyLimit = "1K"
	// unsubscribeRate and unsubscribeBurst bound one client address: a
	// person needs a few requests; a mail provider posting its users'
	// one-click unsubscribes from one address needs more, and gets them.
	unsubscribeRate  = rate.Limit(5)
	unsubscribeBurst = 50
)

// unsubscribeRoutes is the state of the /u routes: the links (for the
// secret) and the per-client limiters (an IPv6 client is its /64:
// keyedrate.ClientKey).
type unsubscribeRoutes struct {
	links   *suppression.Links
	clients *keyedrate.Clients
}

func newUnsubscribeRoutes(pool *pgxpool.Pool, publicURL string) *unsubscribeRoutes {
	return &unsubscribeRoutes{links: suppression.NewLinks(pool, publicURL),
		clients: keyedrate.NewClients(unsubscribeRate, unsubscribeBurst, 0)}
}

func (u *unsubscribeRoutes) allow(client string, now time.Time) bool {
	return u.clients.AllowAt(client, now)
}

// errUnsubscribeBusy: a client over its rate.
var errUnsubscribeBusy = errors.New("too many requests from your address: wait a minute and try again")

// errOneClick: a POST without the RFC 8058 body.
var errOneClick = errors.New("an unsubscribe request carries List-Unsubscribe=One-Click in its body (RFC 8058): nothing was changed")

// handleUnsubscribeForm shows the confirm button of a link; it never
// unsubscribes.
func (s *Server) handleUnsubscribeForm(c echo.Context) error {
	return s.unsubscribe(c, false)
}

// handleUnsubscribe unsubscribes the link's address: the one-click POST
// of a mail provider or the confirm button's.
func (s *Server) handleUnsubscribe(c echo.Context) error {
	return s.unsubscribe(c, true)
}

func (s *Server) unsubscribe(c echo.Context, post bool) error {
	page := view.UnsubscribePage{Page: view.Page{Title: "Unsubscribe", Assets: s.assets.view()}}
	refuse := func(status int, err error) error {
		page.Refusal = err.Error()
		return s.render(c, status, view.Unsubscribe(page))
	}
	if !s.unsub.allow(c.RealIP(), s.cfg.Now()) {
		c.Response().Header().Set("Retry-After", "60")
		return refuse(http.StatusTooManyRequests, errUnsubscribeBusy)
	}
	token := c.Param("token")
	ctx := c.Request().Context()
	var (
		sub suppression.Subscription
		err error
	)
	if post {
		// The body only (RFC 8058: a POST whose body is
		// List-Unsubscribe=One-Click, urlencoded or multipart): a query
		// string would let any link or redirect unsubscribe someone.
		if c.Request().PostFormValue("List-Unsubscribe") != "One-Click" {
			return refuse(http.StatusBadRequest, errOneClick)
		}
		sub, err = s.unsub.links.Unsubscribe(ctx, token)
	} else {
		sub, err = s.unsub.links.Check(ctx, token)
	}
	switch {
	case errors.Is(err, suppression.ErrMalformedLink):
		return refuse(http.StatusBadRequest, err)
	case errors.Is(err, suppression.ErrUnknownLink):
		return refuse(http.StatusNotFound, err)
	case err != nil:
		return err
	}
	page.Address = sub.Address
	page.Campaign, page.Sender = s.unsubscribeNames(ctx, sub.CampaignID)
	page.Service = s.serviceName()
	page.Done = post
	if !post {
		// A link opened again after its unsubscribe: say so, rather than
		// ask again. The link is its address's own (its MAC), so this
		// tells its holder only about that address.
		e, ok, err := suppression.Lookup(ctx, s.cfg.Pool, sub.Address)
		if err != nil {
			return err
		}
		if ok {
			page.Already, page.Since = true, e.CreatedAt
		}
	}
	// Relative (the token alone): the page's own URL, also behind a
	// proxy that serves Onceplan under a path.
	page.Action = token
	return s.render(c, http.StatusOK, view.Unsubscribe(page))
}

// serviceName names the Onceplan a link belongs to, as its reader knows
// it: the host of --public-url, the address the link itself points at.
func (s *Server) serviceName() string {
	u, err := url.Parse(s.cfg.PublicURL)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Hostname()
}

// unsubscribeNames are the name of the campaign a link came in and the
// sender its messages are from (the approved plan's From, else the
// draft's), for the page to say what the reader unsubscribes from. A
// failure to read them is logged and the page says less: the
// unsubscribe itself must not depend on it.
func (s *Server) unsubscribeNames(ctx context.Context, campaignID string) (campaign, sender string) {
	camp, err := approval.GetCampaign(ctx, s.cfg.Pool, campaignID)
	if err != nil {
		s.cfg.Logger.Warn("unsubscribe page: reading the campaign", "campaign", campaignID, "error", err)
		return "", ""
	}
	if camp.PlanID != 0 {
		if pl, err := plan.GetPlan(ctx, s.cfg.Pool, camp.PlanID); err == nil {
			return camp.Name, pl.Payload.From
		}
	}
	d, err := approval.GetDraft(ctx, s.cfg.Pool, camp.ID, camp.Version)
	if err != nil {
		s.cfg.Logger.Warn("unsubscribe page: reading the draft", "campaign", campaignID, "error", err)
		return camp.Name, ""
	}
	return camp.Name, d.Payload.From
}

// sampleUnsubscribeURL is the unsubscribe link a preview of camp's
// messages shows: a sample under the public URL, or none for a
// transactional campaign.
func (s *Server) sampleUnsubscribeURL(camp approval.Campaign) string {
	if !camp.ListUnsubscribe {
		return ""
	}
	return s.unsub.links.SampleURL()
}
