package web

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/web/view"
)

// accountPasswordPath is the signed-in user's own password form.
const accountPasswordPath = "/account/password"

// passwordForm is the change of one's own password: the current one, and
// the new one twice.
type passwordForm struct {
	Current, New, Confirm string
}

func readPasswordForm(c echo.Context) passwordForm {
	return passwordForm{Current: c.FormValue("current_password"), New: c.FormValue("password"), Confirm: c.FormValue("password_confirm")}
}

// Validate checks what the form alone can tell: both typings of the new
// password agree. The rest (the current password, the policy) is
// auth.ChangePassword's.
func (f passwordForm) Validate() error {
	if f.New != f.Confirm {
		return &onceplan.FieldError{Field: "password_confirm", Reason: "does not match the new password: type it the same twice"}
	}
	return nil
}

func (s *Server) renderAccountPassword(c echo.Context, status int, errs map[string]string, msg string) error {
	p := view.AccountPasswordPage{Page: s.page(c, "Your password", "account-password"), Email: mustActor(c).Email, FieldErrors: errs,
		MinLength: auth.MinPasswordLength}
	p.Error = msg
	return s.render(c, status, view.AccountPassword(p))
}

// handleAccountPassword shows the signed-in user the form that changes
// their own password.
func (s *Server) handleAccountPassword(c echo.Context) error {
	return s.renderAccountPassword(c, http.StatusOK, nil, "")
}

// handleAccountPasswordSave changes the signed-in user's password
// (auth.ChangePassword: the current one required, every session ended)
// and keeps this browser signed in on the new session it starts.
func (s *Server) handleAccountPasswordSave(c echo.Context) error {
	f := readPasswordForm(c)
	err := f.Validate()
	var res auth.PasswordChange
	if err == nil {
		res, err = auth.ChangePassword(c.Request().Context(), s.cfg.Pool, auth.ChangePasswordParams{
			UserID: mustActor(c).UserID, Current: f.Current, New: f.New,
			Meta: auth.LoginMeta{IP: c.RealIP(), UserAgent: c.Request().UserAgent()},
		})
	}
	if err != nil {
		if errs, ok := fieldErrors(err); ok {
			return s.renderAccountPassword(c, http.StatusUnprocessableEntity, errs, "")
		}
		var te *auth.ThrottledError
		if errors.As(err, &te) {
			rid, _ := c.Get(ctxRequestID).(string)
			s.cfg.Logger.Warn("password change throttled", "email", mustActor(c).Email, "ip", c.RealIP(),
				"wait", te.Wait.Round(time.Second).String(), "until", te.Until, "scope", te.Scope, "request_id", rid)
			status, _, msg := classify(err)
			return s.renderAccountPassword(c, status, nil, msg)
		}
		return err
	}
	s.setCookie(c, sessionCookie, res.Token, int(auth.SessionMaxAge.Seconds()))
	return redirect(c, accountPasswordPath, "password-changed")
}
