package api

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/onceplan"
)

func boolParam(c echo.Context, name string) (bool, error) {
	v := c.QueryParam(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &onceplan.FieldError{Field: name, Reason: fmt.Sprintf("must be true or false, not %q", v)}
	}
	return b, nil
}

func intParam(c echo.Context, name string) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &onceplan.FieldError{Field: name, Reason: fmt.Sprintf("must be an integer, not %q", v)}
	}
	return n, nil
}

type reasonRequest struct {
	Reason string `json:"reason"`
}

func (a *API) reason(c echo.Context, required bool) (string, error) {
	var req reasonRequest
	if c.Request().ContentLength == 0 && !required {
		return "", nil
	}
	if err := a.decode(c, &req); err != nil {
		return "", err
	}
	if required && strings.TrimSpace(req.Reason) == "" {
		return "", &onceplan.FieldError{Field: "reason", Reason: "is required"}
	}
	return req.Reason, nil
}

// noBody accepts an empty body or an empty JSON object.
func (a *API) noBody(c echo.Context) error {
	if c.Request().ContentLength == 0 {
		return nil
	}
	var empty struct{}
	return a.decode(c, &empty)
}
