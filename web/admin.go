package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/jobs"
	"github.com/onceplan/onceplan/jobs/riverdb"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/web/view"
)

// adminPage gathers users, their tokens, the providers' queues and the
// registered bump policies.
func (s *Server) adminPage(c echo.Context) (view.AdminPage, error) {
	ctx := c.Request().Context()
	p := view.AdminPage{Page: s.page(c, "Admin", "admin"), RiverUI: s.riverUI != nil}
	for _, r := range auth.Roles {
		p.Roles = append(p.Roles, string(r))
	}
	users, err := auth.ListUsers(ctx, s.cfg.Pool)
	if err != nil {
		return p, err
	}
	for _, u := range users {
		row := view.UserRow{ID: u.ID, Email: u.Email, Name: u.Name, Disabled: u.Disabled()}
		for _, r := range u.Roles {
			row.Roles = append(row.Roles, string(r))
		}
		p.Users = append(p.Users, row)
		tokens, err := auth.ListTokens(ctx, s.cfg.Pool, u.Email)
		if err != nil {
			return p, err
		}
		for _, t := range tokens {
			tr := view.TokenRow{ID: t.ID, User: t.UserEmail, Name: t.Name, Agent: t.Agent, Prefix: t.Prefix, Created: t.CreatedAt, Revoked: t.Revoked()}
			if t.LastUsedAt != nil {
				tr.LastUsed = *t.LastUsedAt
			}
			p.Tokens = append(p.Tokens, tr)
		}
	}
	events, err := auth.RecentEvents(ctx, s.cfg.Pool, 50)
	if err != nil {
		return p, err
	}
	for _, e := range events {
		p.Events = append(p.Events, view.AdminEvent{At: e.CreatedAt, Actor: e.Who(), Action: e.Action, Subject: e.Subject, Detail: e.Detail})
	}
	policies, err := ledger.NewStore(s.cfg.Pool).Policies(ctx)
	if err != nil {
		return p, err
	}
	for _, pol := range policies {
		p.Policies = append(p.Policies, view.PolicyRow{Name: pol.Name, Description: pol.Description, RegisteredBy: pol.RegisteredBy, Registered: pol.CreatedAt})
	}
	if s.cfg.Providers != nil {
		queues, err := riverdb.QueueStates(ctx, s.cfg.Pool)
		if err != nil {
			return p, err
		}
		for _, name := range s.cfg.Providers.Names() {
			pr, _ := s.cfg.Providers.Get(name)
			caps := pr.Capabilities()
			q := jobs.QueueFor(name)
			st := queues[q]
			p.Providers = append(p.Providers, view.ProviderRow{
				Name: name, Kind: pr.Kind(), URL: pr.String(), Dedupe: caps.Dedupe, Probe: caps.Probe, Queue: q,
				Rate: providerRate(provider.RateOf(pr)), Batch: providerBatch(provider.BatchSizeOf(pr)), Window: providerWindow(caps),
				Paused: st.Paused, PausedUntil: st.PausedUntil, Available: st.Available, Running: st.Running, Retryable: st.Retryable,
			})
		}
	}
	p.Notifications, err = s.notificationsSection(ctx)
	return p, err
}

// providerRate words a provider's rate limit in force and whose budget it
// is (provider.RateOf).
func providerRate(perSecond float64, scope string) string {
	if perSecond <= 0 {
		return "no limit"
	}
	var r string
	if perSecond >= 1 {
		r = strconv.FormatFloat(perSecond, 'f', -1, 64) + " calls a second"
	} else {
		r = "1 call every " + spanWords(time.Duration(float64(time.Second)/perSecond))
	}
	if scope == provider.RateScopeAccount {
		return r + ", shared by the account (every process)"
	}
	return r + " per process"
}

// providerBatch words how many messages go in one call (batch=N).
func providerBatch(n int) string {
	if n <= 1 {
		return "1 message"
	}
	return "up to " + strconv.Itoa(n) + " messages"
}

// providerWindow words how long recovery can rely on the provider, from
// the first call with an effect's key (provider.Capabilities): a repeat
// with the same key is deduplicated, or the message can be asked about.
// Past it an attempt in doubt is unknown for a person.
func providerWindow(caps provider.Capabilities) string {
	var parts []string
	if caps.Dedupe {
		if caps.DedupeWindow > 0 {
			parts = append(parts, "dedupes a repeat for "+spanWords(caps.DedupeWindow))
		} else {
			parts = append(parts, "dedupes a repeat for ever")
		}
	}
	if caps.Probe {
		if caps.ProbeRetention > 0 {
			parts = append(parts, "can be asked for "+spanWords(caps.ProbeRetention))
		} else {
			parts = append(parts, "can be asked for ever")
		}
		if caps.SettleWindow > 0 {
			parts = append(parts, "\"not found\" is final after "+spanWords(caps.SettleWindow))
		}
	}
	if len(parts) == 0 {
		return "none: a message in flight at a crash is unknown for a person"
	}
	return strings.Join(parts, "; ") + ", from the first call"
}

// spanWords words a duration of a provider's settings: "24 h", "45 days",
// "2 min", "30 s".
func spanWords(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return d.String()
}

// handleAdmin shows the admin page, with the secret a creation just made
// when the redirect names it (shown once).
func (s *Server) handleAdmin(c echo.Context) error {
	p, err := s.adminPage(c)
	if err != nil {
		return err
	}
	if r, ok := s.shownFor(c); ok {
		p.NewToken, p.NewTokenName = r.token, r.name
		p.NewUser, p.NewPassword = r.newUser, r.password
	}
	return s.render(c, http.StatusOK, view.Admin(p))
}

func readRoles(c echo.Context) ([]auth.Role, error) {
	form, err := c.FormParams()
	if err != nil {
		return nil, err
	}
	var roles []auth.Role
	for _, r := range form["roles"] {
		role, err := auth.ParseRole(r)
		if err != nil {
			return nil, echo.NewHTTPError(http.StatusUnprocessableEntity, err.Error())
		}
		roles = append(roles, role)
	}
	return roles, nil
}

// handleUserCreate adds a user with a generated password, shown once on
// the page the redirect leads to.
func (s *Server) handleUserCreate(c echo.Context) error {
	roles, err := readRoles(c)
	if err != nil {
		return err
	}
	password := auth.GeneratePassword()
	var u auth.User
	err = s.adminTx(c, func(ctx context.Context, tx pgx.Tx, actor int64) error {
		var err error
		u, err = auth.CreateUser(ctx, tx, auth.NewUser{
			Email: strings.TrimSpace(c.FormValue("email")), Name: strings.TrimSpace(c.FormValue("name")),
			Roles: roles, Password: password,
		})
		if err != nil {
			return err
		}
		return auth.RecordEvent(ctx, tx, actor, auth.EventUserAdd, u.Email, map[string]any{"roles": roles})
	})
	if err != nil {
		return err
	}
	return s.redirectShowing(c, "/admin", "user-created", shownResult{newUser: u.Email, password: password})
}

// userByParam reads the user named by the route's :uid.
func (s *Server) userByParam(c echo.Context) (auth.User, error) {
	id, err := strconv.ParseInt(c.Param("uid"), 10, 64)
	if err != nil {
		return auth.User{}, echo.NewHTTPError(http.StatusNotFound, "no such user")
	}
	return auth.GetUser(c.Request().Context(), s.cfg.Pool, id)
}

func (s *Server) handleUserRoles(c echo.Context) error {
	u, err := s.userByParam(c)
	if err != nil {
		return err
	}
	roles, err := readRoles(c)
	if err != nil {
		return err
	}
	err = s.adminTx(c, func(ctx context.Context, tx pgx.Tx, actor int64) error {
		if _, err := auth.SetRoles(ctx, tx, u.Email, roles); err != nil {
			return err
		}
		return auth.RecordEvent(ctx, tx, actor, auth.EventUserRoles, u.Email, map[string]any{"from": u.Roles, "to": roles})
	})
	if err != nil {
		return err
	}
	return redirect(c, "/admin", "roles-saved")
}

func (s *Server) handleUserDisable(c echo.Context) error {
	u, err := s.userByParam(c)
	if err != nil {
		return err
	}
	err = s.adminTx(c, func(ctx context.Context, tx pgx.Tx, actor int64) error {
		if _, err := auth.DisableUser(ctx, tx, u.Email); err != nil {
			return err
		}
		return auth.RecordEvent(ctx, tx, actor, auth.EventUserDisable, u.Email, nil)
	})
	if err != nil {
		return err
	}
	return redirect(c, "/admin", "user-disabled")
}

func (s *Server) handleUserEnable(c echo.Context) error {
	u, err := s.userByParam(c)
	if err != nil {
		return err
	}
	err = s.adminTx(c, func(ctx context.Context, tx pgx.Tx, actor int64) error {
		if _, err := auth.EnableUser(ctx, tx, u.Email); err != nil {
			return err
		}
		return auth.RecordEvent(ctx, tx, actor, auth.EventUserEnable, u.Email, nil)
	})
	if err != nil {
		return err
	}
	return redirect(c, "/admin", "user-enabled")
}

// handleTokenCreate makes an API token and shows its secret once, on the
// page the redirect leads to (it is stored as a hash).
func (s *Server) handleTokenCreate(c echo.Context) error {
	var (
		secret string
		t      auth.Token
	)
	err := s.adminTx(c, func(ctx context.Context, tx pgx.Tx, actor int64) error {
		var err error
		secret, t, err = auth.CreateToken(ctx, tx, strings.TrimSpace(c.FormValue("user")), c.FormValue("name"), c.FormValue("agent") != "")
		if err != nil {
			return err
		}
		return auth.RecordEvent(ctx, tx, actor, auth.EventTokenCreate, t.UserEmail,
			map[string]any{"token": t.Prefix, "name": t.Name, "agent": t.Agent})
	})
	if err != nil {
		return err
	}
	return s.redirectShowing(c, "/admin", "token-created", shownResult{token: secret, name: t.Name})
}

func (s *Server) handleTokenRevoke(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("tid"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such token")
	}
	err = s.adminTx(c, func(ctx context.Context, tx pgx.Tx, actor int64) error {
		t, err := auth.RevokeToken(ctx, tx, id)
		if err != nil {
			return err
		}
		return auth.RecordEvent(ctx, tx, actor, auth.EventTokenRevoke, t.UserEmail, map[string]any{"token": t.Prefix, "name": t.Name})
	})
	if err != nil {
		return err
	}
	return redirect(c, "/admin", "token-revoked")
}

// adminTx runs an administrative change and its audit record in one
// transaction: the change is never made without its record.
func (s *Server) adminTx(c echo.Context, fn func(ctx context.Context, tx pgx.Tx, actor int64) error) error {
	ctx := c.Request().Context()
	actor := mustActor(c)
	return pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error { return fn(ctx, tx, actor.UserID) })
}
