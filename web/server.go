// Package web is Onceplan's HTTP face: the JSON API, the server-rendered UI
// and the health endpoints. It is the only package that knows HTTP; it calls
// the domain packages and translates their errors to statuses in one place.
package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/migrations"
)

// Config is what the server needs.
type Config struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
}

// Server serves Onceplan over HTTP.
type Server struct {
	cfg  Config
	echo *echo.Echo
	http *http.Server
	ln   net.Listener
}

// NewServer builds the server and its routes.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	s := &Server{cfg: cfg, echo: e}
	s.routes()
	return s
}

// Handler returns the server's HTTP handler (for tests).
func (s *Server) Handler() http.Handler { return s.echo }

// Listen binds addr, saying in one sentence what to do when it cannot.
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return fmt.Errorf("cannot listen on %s: the address is already in use (is another onceplan serve running?); choose another with --listen", addr)
		case errors.Is(err, syscall.EACCES):
			return fmt.Errorf("cannot listen on %s: permission denied (ports below 1024 need privileges); choose another with --listen", addr)
		default:
			return fmt.Errorf("cannot listen on %s: %w", addr, err)
		}
	}
	s.ln = ln
	return nil
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
	if s.http == nil {
		if s.ln != nil {
			return s.ln.Close()
		}
		return nil
	}
	return s.http.Shutdown(ctx)
}

func (s *Server) routes() {
	s.echo.GET("/healthz", s.handleHealthz)
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
