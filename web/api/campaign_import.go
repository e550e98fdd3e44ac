package api

import (
	"fmt"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

// importTargets takes text/csv or the JSON list; ?append=true adds to the
// draft's list, ?address_column= names the CSV's address column, and the
// Content-Type's charset its encoding (text/csv; charset=iso-8859-1 or
// windows-1252; default UTF-8).
func (a *API) importTargets(c echo.Context, actor auth.Actor) error {
	ct := c.Request().Header.Get("Content-Type")
	media, params, _ := mime.ParseMediaType(ct)
	var format plan.Format
	switch media {
	case "text/csv":
		format = plan.FormatCSV
	case "application/json":
		format = plan.FormatJSON
	default:
		return writeError(c, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("send the target list as text/csv or application/json, not %q", ct))
	}
	encoding, err := plan.ParseEncoding(params["charset"])
	if err != nil {
		return writeError(c, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("the charset of %q is not one a list may be in: send utf-8, iso-8859-1 or windows-1252", ct))
	}
	appendList, err := boolParam(c, "append")
	if err != nil {
		return a.fail(c, err)
	}
	res, err := a.cfg.Approval.ImportTargets(c.Request().Context(), actor, c.Param("id"), approval.TargetsParams{
		Format: format, Body: c.Request().Body, AddressColumn: c.QueryParam("address_column"), Encoding: encoding, Append: appendList,
	})
	return a.answer(c, http.StatusOK, res, err)
}
