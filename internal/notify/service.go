package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
)

// Defaults of Config.
const (
	// DefaultWindow: at most one attention message per campaign per
	// window.
	DefaultWindow = 5 * time.Minute
	// WaitPerWindow: the wait defaults to the window divided by this.
	WaitPerWindow = 10
)

// AccountPath is the page where a signed-in user chooses which events
// reach them (package web serves it); messages link to it.
const AccountPath = "/account/notifications"

// Config is what a Service needs.
type Config struct {
	DB        *pgxpool.Pool
	Notifiers *Registry
	// PublicURL is the base of the messages' links (--public-url).
	// Default suppression.DefaultPublicURL.
	PublicURL string
	// Window: at most one attention message per campaign per window.
	// Default DefaultWindow.
	Window time.Duration
	// Wait: a growth of a campaign's unknown, stranded or failed targets
	// gathers this long before its message goes out, so that a burst
	// arrives as one message with its whole count. Default
	// Window/WaitPerWindow.
	Wait time.Duration
	// FailedForGood counts the targets of campaign c's plan whose attempt
	// failed and that nothing will retry (package jobs knows River's
	// jobs): attention counts only those as failed, not a target whose
	// retry is still queued. Nil: every failed target counts.
	FailedForGood func(ctx context.Context, db onceplan.DB, c approval.Campaign) (int, error)
	// Owner names this process in the attempts it records.
	Owner  string
	Logger *slog.Logger
}

// WithDefaults returns c with its zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.PublicURL = strings.TrimRight(cmp.Or(c.PublicURL, suppression.DefaultPublicURL), "/")
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.Wait = cmp.Or(c.Wait, c.Window/WaitPerWindow)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Service expands events into notifications, delivers them, and scans
// campaigns for targets that need attention. It is safe for concurrent
// use.
type Service struct {
	cfg Config
}

// NewService returns a Service on cfg with its defaults.
func NewService(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.DB == nil:
		return nil, errors.New("notify: a database is required")
	case cfg.Window <= 0 || cfg.Wait < 0:
		return nil, fmt.Errorf("notify: the window (%s) must be positive and the wait (%s) not negative", cfg.Window, cfg.Wait)
	}
	return &Service{cfg: cfg}, nil
}

// Notifiers are the configured notifiers.
func (s *Service) Notifiers() *Registry { return s.cfg.Notifiers }
