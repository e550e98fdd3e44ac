// Package pgnotify wakes the goroutines of one process that wait for
// PostgreSQL notifications on one channel, each for notifications with
// its own payload (a campaign's id, a ledger key), over one listening
// connection shared by all of them.
//
// A Hub guarantees: a waiter is signalled once the process listens, so a
// read after that signal sees every change committed before it, and a
// notification follows every change committed after; a listening
// connection that fails wakes every waiter (notifications may have been
// lost) and is opened again. The connection is taken out of the pool, so
// waiting never uses up the pool; it is opened when the first waiter
// comes and closed when the last one leaves, so no goroutine or
// connection outlives the waits.
package pgnotify

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Recheck is how often a waiter should read its state again without
// being notified: a backstop for a notification lost with a listening
// connection, not the way changes normally arrive.
const Recheck = 5 * time.Second

// Notify sends payload on channel at tx's commit, never before.
func Notify(ctx context.Context, tx pgx.Tx, channel, payload string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// Hub shares one LISTEN connection on one channel among every waiter of
// the process.
type Hub struct {
	pool    *pgxpool.Pool
	channel string

	mu sync.Mutex
	// waiters by payload; a payload without waiters has no entry, so the
	// map is empty exactly when nobody waits.
	waiters map[string]map[*Waiter]struct{}
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

// Waiter is one waiting goroutine; Wake holds at most one pending signal
// (a waiter reads everything again, so signals coalesce).
type Waiter struct {
	payload string
	wake    chan struct{}
}

// Wake is signalled when the waiter's payload was notified, or when it
// should read again for another reason.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

func (w *Waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// New returns a Hub for channel (an SQL identifier: it is written into
// the LISTEN statement as is) on pool.
func New(pool *pgxpool.Pool, channel string) *Hub {
	return &Hub{pool: pool, channel: channel, waiters: map[string]map[*Waiter]struct{}{}}
}

// Add registers a waiter for payload. Remove it when done.
func (h *Hub) Add(payload string) *Waiter {
	w := &Waiter{payload: payload, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters[payload] == nil {
		h.waiters[payload] = map[*Waiter]struct{}{}
	}
	h.waiters[payload][w] = struct{}{}
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

// Remove unregisters w; the last waiter out stops the listening goroutine
// and waits until it has closed its connection.
func (h *Hub) Remove(w *Waiter) {
	h.mu.Lock()
	delete(h.waiters[w.payload], w)
	if len(h.waiters[w.payload]) == 0 {
		delete(h.waiters, w.payload)
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
func (h *Hub) listen(ctx context.Context, r *hubRun) {
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
		backoff = min(2*backoff, Recheck)
	}
}

func (h *Hub) listenOnce(ctx context.Context, r *hubRun) {
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
	if _, err := conn.Exec(ctx, "LISTEN "+h.channel); err != nil {
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
func (h *Hub) wakeAll(r *hubRun, listening bool) {
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

// wake signals the waiters of payload.
func (h *Hub) wake(r *hubRun, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != r {
		return
	}
	for w := range h.waiters[payload] {
		w.signal()
	}
}

// Wait is the long poll every waiter of a hub runs: it listens on h for
// payload and calls check each time payload is notified (or Recheck
// passes, or the listening connection was replaced), until check reports
// done; once wait has passed it calls check a last time and returns
// whatever check found. check reads the waited-for state and keeps what
// it read: the caller answers with it. Wait returns ctx's error when ctx
// ends first, and check's error as it is unless ctx ended meanwhile. The
// caller reads the state once before it waits (a state already final
// needs no listening); a wait of 0 or less returns at once.
func Wait(ctx context.Context, h *Hub, payload string, wait time.Duration, check func(context.Context) (done bool, err error)) error {
	if wait <= 0 {
		return nil
	}
	w := h.Add(payload)
	defer h.Remove(w)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	recheck := time.NewTicker(Recheck)
	defer recheck.Stop()
	for {
		expired := false
		select {
		case <-w.Wake():
		case <-recheck.C:
		case <-deadline.C:
			expired = true
		case <-ctx.Done():
			return ctx.Err()
		}
		done, err := check(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if done || expired {
			return nil
		}
	}
}
