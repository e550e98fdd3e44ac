package toolcall

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgnotify"
)

// Defaults and bounds of a lease.
const (
	// DefaultLease is a begin's lease when the caller names none: the
	// caller heartbeats well within it while the call runs.
	DefaultLease = time.Minute
	MinLease     = time.Second
	MaxLease     = time.Hour
	// MaxArgsBytes bounds a call's args (migration 0021's check).
	MaxArgsBytes = 1 << 20
	// MaxIdentityBytes bounds each text of a call's identity (event,
	// scope, target): they are stored beside the key and indexed, and an
	// index entry holds at most a few kilobytes.
	MaxIdentityBytes = 1000
	// MaxRawBytes bounds a settle's raw answer.
	MaxRawBytes = 4 << 20
	// DefaultProbeTimeout bounds one probe request.
	DefaultProbeTimeout = 10 * time.Second
)

// Options configure a Service.
type Options struct {
	Logger *slog.Logger
	// HTTP asks probes; default a client with DefaultProbeTimeout.
	HTTP *http.Client
}

// Service begins, settles and recovers single effects.
type Service struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	http   *http.Client
	// changes wakes the waiters of a key (Wait) when a transaction that
	// changed its call commits (recordEvent notifies).
	changes *pgnotify.Hub
}

// NewService returns a Service on pool.
func NewService(pool *pgxpool.Pool, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Timeout: DefaultProbeTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Service{pool: pool, logger: opts.Logger, http: opts.HTTP, changes: pgnotify.New(pool, ChangeChannel)}
}

// refusal translates PostgreSQL's refusal of what was not registered or
// approved (OP007) into a conflict, of a campaign target's key (OP008:
// a call begun before single effects had keys of their own) into a
// forbidden action, and the ledger's SQLSTATEs as the ledger does.
func refusal(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "OP007" || pgErr.Code == "OP006"):
		return fmt.Errorf("%w: %s", onceplan.ErrConflict, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "OP008":
		return fmt.Errorf("%w: %s", onceplan.ErrForbidden, pgErr.Message)
	}
	return err
}
