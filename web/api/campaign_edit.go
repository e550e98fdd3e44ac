package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
)

type editRequest struct {
	From    *string `json:"from"`
	Subject *string `json:"subject"`
	Text    *string `json:"text"`
	HTML    *string `json:"html"`
}

// editCampaign changes the draft's payload; the fields given replace the
// current ones. On an approved or running campaign it starts a new version
// that needs a new approval.
func (a *API) editCampaign(c echo.Context, actor auth.Actor) error {
	var req editRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	cur, err := a.current(c)
	if err != nil {
		return a.fail(c, err)
	}
	p := cur.Draft.Payload
	for _, f := range []struct {
		dst *string
		src *string
	}{{&p.From, req.From}, {&p.Subject, req.Subject}, {&p.Text, req.Text}, {&p.HTML, req.HTML}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	res, err := a.cfg.Approval.Edit(c.Request().Context(), actor, cur.Campaign.ID, p)
	return a.answer(c, http.StatusOK, res, err)
}
