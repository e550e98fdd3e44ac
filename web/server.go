// Package web is Onceplan's HTTP face: the server-rendered UI and the health
// endpoint. It is the only package that knows HTTP; it calls the domain
// packages (approval, plan, ledger, auth) and translates their errors to
// statuses in one place (errors.go). Every route is listed in routes.go with
// the role it needs; every state-changing request carries a CSRF token.
package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/migrations"
)

// Config is what the server needs. Pool is required; without Approval
// the server answers only /healthz (as `onceplan serve` did before the UI).
type Config struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Approval runs the campaign workflow for the UI's actions.
	Approval *approval.Service
	// Providers lists the configured providers (new-campaign form, admin).
	Providers *provider.Registry
	// River, when set, mounts River's own UI at /riverui for admins.
	River *river.Client[pgx.Tx]
	// SecureCookies sets the Secure flag on cookies even when a request
	// does not look like HTTPS (behind a TLS-terminating proxy that does
	// not say so). Requests over TLS always get it.
	SecureCookies bool
	// Now is the clock (tests set it).
	Now func() time.Time
	// Counts caches counts per list; share one with the API so that both
	// see an action's effect at once. Nil: a cache of its own.
	Counts *approval.CountsCache
	// PublicURL is the base of the unsubscribe links (package
	// unsubscribe): the preview shows a sample link under it. Default
	// unsubscribe.DefaultPublicURL.
	PublicURL string
	// TestSend sends the draft and approval pages' test messages; share
	// the API's, so that one user's rate limit covers both. Nil: one of
	// its own on Providers (no allow-list).
	TestSend *approval.TestSender
	// ToolCalls serves the single effects' pages; share the API's. Nil:
	// one of its own on Pool.
	ToolCalls *toolcall.Service
	// Notifiers are the configured notifiers (the admin page lists them
	// with their deliveries). Nil: none.
	Notifiers *notify.Registry
	// NotifyWindow is the attention window in force (--notify-window),
	// which the admin page states. Default notify.DefaultWindow.
	NotifyWindow time.Duration
	// TrustedProxies are the reverse proxies' address ranges whose
	// X-Forwarded-For and X-Forwarded-Proto are believed (clientip.go);
	// none: the direct peer's address is the client's, and only a TLS
	// connection (or SecureCookies) counts as HTTPS.
	TrustedProxies []netip.Prefix
	// Mount adds routes of other packages (the JSON API) to the server.
	// They get the request id and security headers, and a session only
	// when a cookie is sent; their own authentication is theirs.
	Mount func(e *echo.Echo)
}

// Server serves Onceplan over HTTP.
type Server struct {
	cfg     Config
	echo    *echo.Echo
	http    *http.Server
	ln      net.Listener
	assets  *assets
	counts  *approval.CountsCache
	riverUI http.Handler
	stopUI  context.CancelFunc
	// forms are the one-time form tokens used (form_token.go); shown is
	// what a POST's redirect shows on the page it leads to (an import
	// report, a secret shown once).
	forms *formTokens
	shown *recent[shownResult]
	// draining is set when shutdown begins: /readyz says so, so a load
	// balancer stops sending before the listener closes.
	draining atomic.Bool
	// unsub serves the unsubscribe links (unsubscribe.go).
	unsub *unsubscribeRoutes
}

// NewServer builds the server and its routes.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Counts == nil {
		cfg.Counts = approval.NewCountsCache()
	}
	if cfg.TestSend == nil && cfg.Pool != nil {
		cfg.TestSend, _ = approval.NewTestSender(approval.TestSendConfig{DB: cfg.Pool, Providers: cfg.Providers}) // no allow-list: no error
	}
	if cfg.ToolCalls == nil && cfg.Pool != nil {
		cfg.ToolCalls = toolcall.NewService(cfg.Pool, toolcall.Options{Logger: cfg.Logger})
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	// Sign-in throttling and the open routes' rate limits count per client
	// address: never believe an X-Forwarded-For that anyone can send, only
	// the trusted proxies' (clientip.go).
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	s := &Server{cfg: cfg, echo: e, assets: loadAssets(), counts: cfg.Counts,
		forms: newFormTokens(), shown: newRecent[shownResult](shownTTL, shownMax),
		unsub: newUnsubscribeRoutes(cfg.Pool, cfg.PublicURL)}
	e.HTTPErrorHandler = s.handleError
	if cfg.River != nil && cfg.Approval != nil {
		if err := s.mountRiverUI(); err != nil {
			cfg.Logger.Warn("River UI is not available", "err", err)
		}
	}
	s.routes()
	return s
}

// Handler returns the server's HTTP handler (for tests).
func (s *Server) Handler() http.Handler { return s.echo }

// UseListener makes the server serve on ln, bound beforehand (Listen):
// serve binds first, so that the workers' unsubscribe links know the
// port actually bound.
func (s *Server) UseListener(ln net.Listener) { s.ln = ln }

// Listen binds addr for a Server, saying in one sentence what to do when
// it cannot.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("cannot listen on %s: the address is already in use (is another onceplan serve running?); choose another with --listen", addr)
		case errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("cannot listen on %s: permission denied (ports below 1024 need privileges); choose another with --listen", addr)
		default:
			return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
		}
	}
	return ln, nil
}

// Addr is the address actually bound (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown; it returns nil after a clean shutdown.
func (s *Server) Serve() error {
	s.http = &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	err := s.http.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting requests and waits for those in flight.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	if s.stopUI != nil {
		s.stopUI()
	}
	if s.http == nil {
		if s.ln != nil {
			return s.ln.Close()
		}
		return nil
	}
	return s.http.Shutdown(ctx)
}

// handleHealthz answers 200 only when the database answers and carries the
// schema this binary expects.
func (s *Server) handleHealthz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 3*time.Second)
	defer cancel()
	version, err := migrations.Current(ctx, s.cfg.Pool)
	if err != nil {
		s.cfg.Logger.Warn("health check failed", "err", err)
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "database": "unreachable"})
	}
	if version != migrations.Latest() {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "database": "schema mismatch", "schema_version": version})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ok", "database": "ok", "schema_version": version})
}

// handleReadyz answers 200 when this process should get traffic: the
// database answers with the expected schema and no shutdown has begun.
// /healthz is the liveness probe; /readyz the readiness one.
func (s *Server) handleReadyz(c echo.Context) error {
	if s.draining.Load() {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "shutting down"})
	}
	return s.handleHealthz(c)
}
