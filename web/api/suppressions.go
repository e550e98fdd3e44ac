package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
)

// The suppression list (package suppression): any signed-in caller may
// read it (an agent too: it may check before it proposes); operators and
// admins may add to it (adding only ever mails fewer people); only an
// admin may take an address off, with a reason. The entries and their
// removals are the write-once record of who did what and why.

type suppressionsPage struct {
	Items []suppression.Entry `json:"items"`
	Next  *string             `json:"next"`
}

func (a *API) listSuppressions(c echo.Context, _ auth.Actor) error {
	p := suppression.ListParams{Address: c.QueryParam("address")}
	if s := c.QueryParam("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return a.fail(c, &onceplan.FieldError{Field: "after", Reason: "is not a cursor this API gave out (use the previous page's \"next\")"})
		}
		p.After = n
	}
	limit, err := intParam(c, "limit")
	if err != nil {
		return a.fail(c, err)
	}
	if c.QueryParams().Has("limit") && (limit < 1 || limit > 1000) {
		return a.fail(c, &onceplan.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and 1000, not %d", limit)})
	}
	p.Limit = limit
	if p.IncludeRemoved, err = boolParam(c, "include_removed"); err != nil {
		return a.fail(c, err)
	}
	items, next, err := suppression.List(c.Request().Context(), a.cfg.Pool, p)
	if err != nil {
		return a.fail(c, err)
	}
	page := suppressionsPage{Items: items}
	if page.Items == nil {
		page.Items = []suppression.Entry{}
	}
	if next != 0 {
		s := strconv.FormatInt(next, 10)
		page.Next = &s
	}
	return c.JSON(http.StatusOK, page)
}

type suppressRequest struct {
	Address string `json:"address"`
	Reason  string `json:"reason"`
	Note    string `json:"note"`
}

// suppressionView is an entry, and whether this request added it (false:
// the address was already suppressed, by the entry shown).
type suppressionView struct {
	suppression.Entry
	Added bool `json:"added"`
}

func (a *API) addSuppression(c echo.Context, actor auth.Actor) error {
	if err := auth.Authorize(actor, auth.ActionSuppress); err != nil {
		return a.fail(c, err)
	}
	var req suppressRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	if strings.TrimSpace(req.Address) == "" {
		return a.fail(c, &onceplan.FieldError{Field: "address", Reason: "is required"})
	}
	if strings.TrimSpace(req.Reason) == "" {
		return a.fail(c, &onceplan.FieldError{Field: "reason", Reason: "is required: one of " + suppression.ReasonNames()})
	}
	e, added, err := suppression.Add(c.Request().Context(), a.cfg.Pool, suppression.AddParams{
		Address: req.Address, Reason: suppression.Reason(req.Reason), Source: suppression.FromActor,
		Actor: actor.Email, Note: req.Note,
	})
	if err != nil {
		return a.fail(c, err)
	}
	status := http.StatusOK
	if added {
		status = http.StatusCreated
	}
	return c.JSON(status, suppressionView{Entry: e, Added: added})
}

func (a *API) removeSuppression(c echo.Context, actor auth.Actor) error {
	if err := auth.Authorize(actor, auth.ActionUnsuppress); err != nil {
		return a.fail(c, err)
	}
	why, err := a.reason(c, true)
	if err != nil {
		return a.fail(c, err)
	}
	addr, err := url.PathUnescape(c.Param("address"))
	if err != nil {
		return a.fail(c, &onceplan.FieldError{Field: "address", Reason: "is not a valid path segment"})
	}
	e, err := suppression.Remove(c.Request().Context(), a.cfg.Pool, addr, actor.Email, why)
	if err != nil {
		return a.fail(c, err)
	}
	return c.JSON(http.StatusOK, e)
}
