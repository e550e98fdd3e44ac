// Package webhook is the route POST /webhooks/{kind}: email
// providers report bounces and complaints there, with no sign-in; each
// kind is authenticated its own way (package inbound). It is one of the
// few routes open to anyone, so it bounds what anyone can make it do: a
// rate per client address (429), a body size (413), a kind that is not
// configured is not found (404), a request that fails authentication
// changes nothing (401 without credentials, 403 with wrong ones, or with
// a signature that is stale or already used on other content), a body
// that does not parse is refused in one sentence (400). No answer says
// whether an address is in any list: a bounce for an unknown address is
// recorded like any other, and the answer counts events, nothing else.
package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/keyedrate"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// Path is the route, with the kind as its parameter.
const Path = "/webhooks/:kind"

// Defaults.
const (
	DefaultMaxBody       = 1 << 20 // 1 MiB: a SendGrid batch is far smaller
	DefaultRatePerClient = 20      // requests per second per client address
	DefaultBurst         = 100
	requestTimeout       = 30 * time.Second
)

// Config is what the route needs.
type Config struct {
	Pool      *pgxpool.Pool
	Endpoints inbound.Endpoints
	Logger    *slog.Logger
	// MaxBody bounds a request body (default DefaultMaxBody).
	MaxBody int64
	// RatePerClient is the sustained requests per second one client
	// address may make, with Burst (defaults DefaultRatePerClient,
	// DefaultBurst).
	RatePerClient rate.Limit
	Burst         int
	// Now is the clock signatures are judged fresh by (default time.Now).
	Now func() time.Time
}

// Handler serves POST /webhooks/{kind}.
type Handler struct {
	cfg Config
	// clients limits each client address, an IPv6 client by its /64
	// (keyedrate.ClientKey).
	clients *keyedrate.Clients
}

// New returns the handler, defaults applied.
func New(cfg Config) *Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.RatePerClient <= 0 {
		cfg.RatePerClient = DefaultRatePerClient
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, clients: keyedrate.NewClients(cfg.RatePerClient, cfg.Burst, 0)}
}

// Register mounts the route on e (no session, no CSRF: the providers
// authenticate each request themselves).
func Register(e *echo.Echo, cfg Config) *Handler {
	h := New(cfg)
	e.POST(Path, h.Serve)
	return h
}

func fail(c echo.Context, status int, code, msg string) error {
	return c.JSON(status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// Serve handles one delivery.
func (h *Handler) Serve(c echo.Context) error {
	client := c.RealIP()
	if !h.clients.Allow(client) {
		c.Response().Header().Set("Retry-After", "1")
		return fail(c, http.StatusTooManyRequests, "rate_limited", "Too many requests from this address; retry later.")
	}
	kind := inbound.Kind(c.Param("kind"))
	ep := h.cfg.Endpoints[kind]
	if ep == nil {
		return fail(c, http.StatusNotFound, "not_found", "No webhook of that kind is configured here.")
	}
	req := c.Request()
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, h.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fail(c, http.StatusRequestEntityTooLarge, "too_large", "The body is larger than this endpoint takes.")
		}
		return fail(c, http.StatusBadRequest, "invalid", "The body could not be read.")
	}
	ctx, cancel := context.WithTimeout(req.Context(), requestTimeout)
	defer cancel()
	log := h.cfg.Logger.With("kind", string(kind), "client", client)

	signed, err := ep.Authenticate(ctx, inbound.Request{Header: req.Header, Body: body})
	if err != nil {
		return h.refuse(c, log, err)
	}
	now := h.cfg.Now()
	if kind == inbound.SES {
		m, err := inbound.ParseSNS(body)
		if err != nil {
			return h.refuse(c, log, err)
		}
		switch m.Type {
		case "SubscriptionConfirmation", "UnsubscribeConfirmation":
			// Nothing is recorded of these, so Accept does not judge
			// them: a stale one is refused here, before any URL is
			// visited.
			if err := signed.Fresh(now); err != nil {
				return h.refuse(c, log, err)
			}
		}
		switch m.Type {
		case "SubscriptionConfirmation":
			if err := ep.SNS().Confirm(ctx, m); err != nil {
				return h.refuse(c, log, err)
			}
			log.Info("webhook: SNS subscription confirmed", "topic", m.TopicArn)
			return c.JSON(http.StatusOK, map[string]any{"confirmed": true})
		case "UnsubscribeConfirmation":
			log.Warn("webhook: SNS says this endpoint was unsubscribed", "topic", m.TopicArn)
			return c.JSON(http.StatusOK, map[string]any{"received": 0})
		}
	}
	events, err := inbound.Parse(kind, body)
	if err != nil {
		return h.refuse(c, log, err)
	}
	res, err := inbound.Accept(ctx, h.cfg.Pool, signed, events, now)
	if errors.Is(err, onceplan.ErrForbidden) {
		return h.refuse(c, log, err) // stale, or a token taken with other content
	}
	if err != nil {
		log.Error("webhook: recording events", "err", err)
		return fail(c, http.StatusInternalServerError, "internal", "The events could not be recorded; retry later.")
	}
	if res.Recorded > 0 {
		log.Info("webhook: events recorded", "recorded", res.Recorded, "duplicate", res.Duplicate, "tied", res.Tied, "suppressed", res.Suppressed)
	}
	return c.JSON(http.StatusOK, map[string]any{"received": len(events), "recorded": res.Recorded, "duplicate": res.Duplicate})
}

// refuse answers an authentication or parse error; its message is the
// error's own sentence (they name no secret and no address).
func (h *Handler) refuse(c echo.Context, log *slog.Logger, err error) error {
	msg := sentence(err)
	switch {
	case errors.Is(err, inbound.ErrUnsigned):
		log.Warn("webhook: refused, no credentials", "err", err)
		return fail(c, http.StatusUnauthorized, "unauthenticated", msg)
	case errors.Is(err, onceplan.ErrForbidden):
		log.Warn("webhook: refused, wrong credentials", "err", err)
		return fail(c, http.StatusForbidden, "forbidden", msg)
	case errors.Is(err, inbound.ErrMalformed):
		log.Info("webhook: refused, malformed", "err", err)
		return fail(c, http.StatusBadRequest, "invalid", msg)
	case errors.Is(err, onceplan.ErrUnavailable):
		log.Warn("webhook: cannot act now", "err", err)
		return fail(c, http.StatusServiceUnavailable, "unavailable", "The request cannot be checked now; retry later.")
	}
	log.Error("webhook: failed", "err", err)
	return fail(c, http.StatusInternalServerError, "internal", "The request failed; retry later.")
}

// sentence turns "forbidden: the signature does not verify" into "The
// signature does not verify."
func sentence(err error) string {
	s := err.Error()
	for _, p := range []string{"unauthenticated: ", "forbidden: ", "malformed: ", "unavailable: "} {
		s = strings.TrimPrefix(s, p)
	}
	if s == "" {
		return "Refused."
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}
