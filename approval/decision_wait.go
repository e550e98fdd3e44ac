package approval

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/onceplan/onceplan/internal/auth"
)

// DecisionWaitMax bounds how long one WaitDecision may wait: the API
// refuses a longer wait, and the MCP tool's timeout has the same bound.
// Long enough that an agent polls about once a minute; short enough for
// proxies' idle timeouts and clients' request timeouts.
const DecisionWaitMax = 60 * time.Second

// DecisionChannel is the PostgreSQL notification channel on which the
// transaction that records a decisive action names its campaign; the
// notification is delivered at its commit, never before, so a waiter that
// re-reads on it sees the decision.
const DecisionChannel = "onceplan_decision"

// decisionRecheck is how often a waiter reads the decision again without
// being notified: a backstop for a notification lost with a listening
// connection, not the way decisions normally arrive.
const decisionRecheck = 5 * time.Second

// notifyDecision tells the waiters of campaign id, at tx's commit, that
// action changed what its Decision may say.
func notifyDecision(ctx context.Context, tx pgx.Tx, id string, action auth.Action) error {
	if !slices.Contains(decisive, action) {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, DecisionChannel, id)
	return err
}

// WaitDecision answers campaign id's Decision as soon as it is final (not
// pending), or once wait has passed with the decision then. A wait of 0
// or less answers at once. When ctx ends first it answers the last
// decision read, with ctx's error. Waiting holds no pooled connection:
// every waiter of the process shares one listening connection
// (decisionHub), and reads the decision only when notified.
func (s *Service) WaitDecision(ctx context.Context, id string, wait time.Duration) (Decision, error) {
	d, err := s.Decision(ctx, id)
	if err != nil || d.Final() || wait <= 0 {
		return d, err
	}
	w := s.decisions.add(id)
	defer s.decisions.remove(w)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	recheck := time.NewTicker(decisionRecheck)
	defer recheck.Stop()
	for {
		expired := false
		select {
		case <-w.wake:
		case <-recheck.C:
		case <-deadline.C:
			expired = true
		case <-ctx.Done():
			return d, ctx.Err()
		}
		next, err := s.Decision(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return d, ctx.Err()
			}
			return d, err
		}
		if d = next; d.Final() || expired {
			return d, nil
		}
	}
}

// decisionHub shares one LISTEN connection among every waiter of the
// process and wakes the waiters of the campaign a notification names. The
// connection is taken out of the pool (hijacked), so that waiting never
// uses up the pool, opened when the first waiter comes and closed when the
// last one leaves: no goroutine or connection outlives the waits.
type decisionHub struct {
	pool *pgxpool.Pool

	mu sync.Mutex
	// waiters by campaign; a campaign without waiters has no entry, so
	// the map is empty exactly when nobody waits.
	waiters map[string]map[*decisionWaiter]struct{}
	// run is the listening goroutine's (nil when none runs); listening
	// is set while its LISTEN is in effect.
	run       *hubRun
	listening bool
}

// hubRun is one listening goroutine: stop ends it, done is closed when it
// has.
type hubRun struct {
	stop context.CancelFunc
	done chan struct{}
}

// decisionWaiter is one waiting request; wake holds at most one pending
// signal (a waiter re-reads everything, so signals coalesce).
type decisionWaiter struct {
	id   string
	wake chan struct{}
}

func (w *decisionWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func newDecisionHub(pool *pgxpool.Pool) *decisionHub {
	return &decisionHub{pool: pool, waiters: map[string]map[*decisionWaiter]struct{}{}}
}

// add registers a waiter for campaign id. It is signalled once the
// process listens (at once when it already does): a read after that
// signal sees every decision committed before, and a notification follows
// every one committed after.
func (h *decisionHub) add(id string) *decisionWaiter {
	w := &decisionWaiter{id: id, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters[id] == nil {
		h.waiters[id] = map[*decisionWaiter]struct{}{}
	}
	h.waiters[id][w] = struct{}{}
	switch {
	case h.run == nil:
		ctx, cancel := context.WithCancel(context.Background())
		r := &hubRun{stop: cancel, done: make(chan struct{})}
		h.run, h.listening = r, false
		go h.listen(ctx, r)
	case h.listening:
		w.signal()
	}
	return w
}

// remove unregisters w; the last waiter out stops the listening goroutine
// and waits until it has closed its connection.
func (h *decisionHub) remove(w *decisionWaiter) {
	h.mu.Lock()
	delete(h.waiters[w.id], w)
	if len(h.waiters[w.id]) == 0 {
		delete(h.waiters, w.id)
	}
	var r *hubRun
	if len(h.waiters) == 0 {
		r, h.run, h.listening = h.run, nil, false
	}
	h.mu.Unlock()
	if r != nil {
		r.stop()
		<-r.done
	}
}

// listen keeps a LISTEN connection open until ctx ends, opening another
// (with backoff) when one fails.
func (h *decisionHub) listen(ctx context.Context, r *hubRun) {
	defer close(r.done)
	backoff := 100 * time.Millisecond
	for {
		h.listenOnce(ctx, r)
		if ctx.Err() != nil {
			return
		}
		// The connection failed: notifications may have been lost, so
		// every waiter reads again now and after the next LISTEN.
		h.wakeAll(r, false)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, decisionRecheck)
	}
}

func (h *decisionHub) listenOnce(ctx context.Context, r *hubRun) {
	pc, err := h.pool.Acquire(ctx)
	if err != nil {
		return
	}
	// A listening connection never goes back to the pool.
	conn := pc.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+DecisionChannel); err != nil {
		return
	}
	h.wakeAll(r, true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		h.wake(r, n.Payload)
	}
}

// wakeAll signals every waiter and records whether r now listens; a run
// that was stopped meanwhile changes nothing.
func (h *decisionHub) wakeAll(r *hubRun, listening bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != r {
		return
	}
	h.listening = listening
	for _, ws := range h.waiters {
		for w := range ws {
			w.signal()
		}
	}
}

// wake signals the waiters of campaign id.
func (h *decisionHub) wake(r *hubRun, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != r {
		return
	}
	for w := range h.waiters[id] {
		w.signal()
	}
}
