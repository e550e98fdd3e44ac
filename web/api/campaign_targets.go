package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
)

type targetsPage struct {
	Items []targetItem `json:"items"`
	Next  *string      `json:"next"`
	// ScannedTo is set when a filtered page stopped early to keep the
	// request short: the list was searched up to this ordinal; "next"
	// continues from there.
	ScannedTo int `json:"scanned_to,omitempty"`
}

// targetItem is one target of the list: audit.TargetRow (its JSON names
// are the export's columns), and updated_at, the name this API gave
// last_at before the row carried the export's columns, kept for clients.
type targetItem struct {
	audit.TargetRow
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// The target cursor is opaque to clients: base64 of the position the
// previous page ended at (an ordinal, or an address when searching).
func encodeCursor(after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("a:" + after))
}

func decodeCursor(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		if rest, ok := strings.CutPrefix(string(b), "a:"); ok {
			return rest, nil
		}
	}
	return "", &onceplan.FieldError{Field: "after", Reason: "is not a cursor this API gave out (use the previous page's \"next\")"}
}

// pageBudget bounds the time a filtered target page may scan; the page
// then ends early with a cursor (see audit.QueryTargets).
const pageBudget = 40 * time.Millisecond

func (a *API) listTargets(c echo.Context, _ auth.Actor) error {
	after, err := decodeCursor(c.QueryParam("after"))
	if err != nil {
		return a.fail(c, err)
	}
	limit, err := intParam(c, "limit")
	if err != nil {
		return a.fail(c, err)
	}
	if c.QueryParams().Has("limit") && (limit < 1 || limit > 1000) {
		return a.fail(c, &onceplan.FieldError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and 1000, not %d", limit)})
	}
	if limit == 0 {
		limit = 100
	}
	state := c.QueryParam("state")
	if state != "" && !slices.Contains(audit.ValidStates, state) {
		return a.fail(c, &onceplan.FieldError{Field: "state", Reason: fmt.Sprintf("%q is not one of %v", state, audit.ValidStates)})
	}
	prefix := strings.ToLower(strings.TrimSpace(c.QueryParam("q")))
	if prefix == "" {
		if _, err := strconv.Atoi(after); after != "" && err != nil {
			return a.fail(c, &onceplan.FieldError{Field: "after", Reason: "is not a cursor this API gave out (use the previous page's \"next\")"})
		}
	}
	cur, err := a.current(c)
	if err != nil {
		return a.fail(c, err)
	}
	ctx := c.Request().Context()
	listID, count, err := approval.ListOf(ctx, a.cfg.Pool, cur.Campaign)
	if err != nil {
		return a.fail(c, err)
	}
	page := targetsPage{Items: []targetItem{}}
	if listID != 0 {
		p, err := audit.QueryTargets(ctx, a.cfg.Pool, audit.TargetQuery{
			ListID: listID, Count: count, State: state, Prefix: prefix, After: after, Limit: limit,
			Budget: pageBudget, StateCount: -1,
		})
		if err != nil {
			return a.fail(c, err)
		}
		for _, r := range p.Rows {
			page.Items = append(page.Items, targetItem{TargetRow: r, UpdatedAt: r.LastAt})
		}
		page.ScannedTo = p.ScannedTo
		if p.Next != "" {
			next := encodeCursor(p.Next)
			page.Next = &next
		}
	}
	return c.JSON(http.StatusOK, page)
}
