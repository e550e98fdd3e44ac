package web

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/web/view"
)

// handleAccountNotifications shows the signed-in user which events reach
// them by email, for the events their roles make them an audience of
// (all of them on by default).
func (s *Server) handleAccountNotifications(c echo.Context) error {
	ctx := c.Request().Context()
	a := mustActor(c)
	prefs, err := notify.Preferences(ctx, s.cfg.Pool, a.UserID)
	if err != nil {
		return err
	}
	p := view.AccountNotificationsPage{Page: s.page(c, "Your notifications", "account"), Email: a.Email,
		MailsUsers: slices.ContainsFunc(s.cfg.Notifiers.All(), (*notify.Notifier).MailsUsers)}
	for _, e := range notify.Events {
		if e.For(a) {
			p.Events = append(p.Events, view.PreferenceRow{Event: string(e), Audience: e.Audience(), Enabled: prefs[e]})
		}
	}
	return s.render(c, http.StatusOK, view.AccountNotifications(p))
}

// preferencesForm is the notifications page's form: the events it showed
// (shown) and those left ticked (event). Only the events shown change, so
// a form from before a role was added leaves the new event as it was.
type preferencesForm struct {
	Shown, On []notify.Event
}

func readPreferencesForm(c echo.Context) (preferencesForm, error) {
	form, err := c.FormParams()
	if err != nil {
		return preferencesForm{}, err
	}
	var f preferencesForm
	for field, dst := range map[string]*[]notify.Event{"shown": &f.Shown, "event": &f.On} {
		for _, v := range form[field] {
			e, err := notify.ParseEvent(v)
			if err != nil {
				return f, echo.NewHTTPError(http.StatusUnprocessableEntity, field+": "+err.Error())
			}
			*dst = append(*dst, e)
		}
	}
	return f, nil
}

// handleAccountNotificationsSave records the signed-in user's choice.
func (s *Server) handleAccountNotificationsSave(c echo.Context) error {
	f, err := readPreferencesForm(c)
	if err != nil {
		return err
	}
	a := mustActor(c)
	prefs := map[notify.Event]bool{}
	for _, e := range f.Shown {
		if e.For(a) {
			prefs[e] = slices.Contains(f.On, e)
		}
	}
	if err := notify.SetPreferences(c.Request().Context(), s.cfg.Pool, a.UserID, prefs); err != nil {
		return err
	}
	return redirect(c, notify.AccountPath, "prefs-saved")
}
