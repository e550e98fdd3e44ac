package executor

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Group commit (docs/ARCHITECTURE.md, "Group commit"). The writes of an
// effect — its claim, then its raw answer with its settle — each commit
// before the next step, but nothing says each must be its own transaction. A
// batcher per step collects what the workers of this process ask for while
// it is busy, writes it with ONE multi-row statement per kind of row over
// unnest(…) arrays, commits, and only then answers each worker. So every
// guarantee holds per effect (its pending row is committed before its call;
// its raw answer before its verdict), while a hundred workers share one
// round trip and one commit per step. (The read of the targets before the
// claims is batched the same way.)
//
// The answer step's transaction is the raw answers' insert, then the
// settles, then the claims of the jobs' next targets that came with them
// (ledger.AnswerMany): the raw bytes are classified before they are sent,
// so they are committed whatever classification does, and a job working
// through a range of targets waits for one commit per effect, not two
// (Executor.call's next). The claim step carries the other claims: a
// job's first target, and any target whose slot could not be kept.
//
// A batch that fails as a whole (a deadlock with another process, a
// constraint a single row breaks) is not retried as a batch: each request
// falls back to the one-row path, which reports its own outcome.
//
// Every claim carries the campaign gate: a row is inserted only if its
// campaign is running this plan and its provider's queue is not paused, in
// the same statement, so a pause or a cancel committed before the claim is
// always seen. A request the batch did not insert (gate closed, or the key
// is blocked) takes the one-row path, which says why.

// maxBatch bounds one statement (and the arrays sent with it).
const maxBatch = 500

// flushers is how many flushes of one step may run at once. One flusher
// per step: each batch then takes in everything that queued while the
// previous one ran. Two per step (a batch forming while another flushes)
// gave smaller batches and less throughput on two cores, with fsync on or
// off (docs/BENCHMARKS.md); a large batch is cut in two instead
// (splitAt).
const flushers = 1

// targetReq reads the targets first … first+count-1 of a list (one for an
// effect, a job's range for a job that carries several).
type targetReq struct {
	listID       int64
	first, count int
	done         chan targetsRes
}

type targetsRes struct {
	targets []targetRes // by ordinal - first
	err     error
}

type targetRes struct {
	to, key string
	vars    map[string]string
	err     error
}

type claimReq struct {
	r    ledger.ClaimRequest
	done chan claimRes
}

type claimRes struct {
	eff ledger.Effect
	won bool
	err error
}

// answerReq is a raw answer to commit and, when settle is set, its verdict
// in the same commit (ledger.AnswerMany); with claim, the claim of the
// job's next target too.
type answerReq struct {
	a     ledger.Answer
	claim *ledger.ClaimRequest
	done  chan answerRes
}

type answerRes struct {
	err error
	// next is the claim's outcome, when the request carried one.
	next claimRes
}

type settleReq struct {
	p    ledger.SettleParams
	done chan error
}

// batcher runs the group-commit loops of one process: the target read and
// the writes.
type batcher struct {
	pool *pgxpool.Pool
	// writes runs the write batches: see newWritePool.
	writes *pgxpool.Pool
	logger *slog.Logger
	// lastWarn is when failed reported a failed batch last (unix ns).
	lastWarn atomic.Int64
	ledger   *ledger.Store
	// writeLedger is the ledger on the write connections; gate is the
	// claims' campaign gate (see Executor.gate).
	writeLedger *ledger.Store
	gate        ledger.Gate
	targetReqs  chan *targetReq
	claims      chan *claimReq
	answers     chan *answerReq
	settles     chan *settleReq
	stop        chan struct{}
	wg          sync.WaitGroup
	startOnce   sync.Once
	started     bool
}

func newBatcher(pool *pgxpool.Pool, gate ledger.Gate, logger *slog.Logger) *batcher {
	b := &batcher{
		pool: pool, ledger: ledger.NewStore(pool), gate: gate, logger: logger,
		targetReqs: make(chan *targetReq, maxBatch), claims: make(chan *claimReq, maxBatch), answers: make(chan *answerReq, maxBatch), settles: make(chan *settleReq, maxBatch),
		stop: make(chan struct{}),
	}
	return b
}

// start starts the loops on first use, so that an executor that never
// performs an effect runs no goroutines.
func (b *batcher) start() {
	b.startOnce.Do(func() {
		b.started = true
		b.writes = newWritePool(b.pool)
		b.writeLedger = ledger.NewStore(b.writes)
		for range flushers {
			b.wg.Add(4)
			go loop(b, b.targetReqs, b.flushTargets)
			go loop(b, b.claims, b.flushClaims)
			go loop(b, b.answers, b.flushAnswers)
			go loop(b, b.settles, b.flushSettles)
		}
	})
}

// close stops the loops after the requests already queued are answered.
func (b *batcher) close() {
	b.startOnce.Do(func() {}) // no start after close
	if b.started {
		close(b.stop)
		b.wg.Wait()
		if b.writes != b.pool {
			b.writes.Close()
		}
	}
}

// newWritePool returns the connections the claim, answer and settle
// batches run on: a few of their own, on the same database and
// credentials as pool, whose sessions plan once.
//
// Planning a batch statement costs more than running it for a handful of
// rows (the claim, with its campaign gate, epoch and attempt lookups,
// most of all): with a few workers per queue, as in production, batches are
// small and planning was the largest part of the database's work per
// effect. These sessions keep each statement's generic plan
// (plan_cache_mode = force_generic_plan) and never choose a sequential
// scan (enable_seqscan = off). The second setting is what makes the first
// safe: a generic plan is made once, maybe while the ledger is empty, and
// kept for the connection's life; a sequential scan chosen then would read
// the whole table on every flush once it has grown. Every lookup the three
// statements make is by the one index that matches it (the primary keys,
// effect_key_history, effect_bump's, and the queue gate's (jobs/riverdb)), which is
// right at any size. The target read is not run here: two indexes of
// target start with list_id, and which is better depends on the list.
func newWritePool(pool *pgxpool.Pool) *pgxpool.Pool {
	cfg := pool.Config().Copy()
	cfg.MaxConns = int32(3 * 2 * flushers) // three steps, each may flush two halves at once
	cfg.MinConns = 0
	// SET once connected rather than startup parameters: a connection
	// pooler in front of PostgreSQL (PgBouncer) refuses or drops startup
	// parameters it does not know, but passes a session's SET on.
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, conn); err != nil {
				return err
			}
		}
		_, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off`)
		return err
	}
	writes, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return pool // the settings only save work; the main pool is correct too
	}
	return writes
}

// loop takes whatever has queued up while the previous flush ran (up to
// maxBatch) and flushes it: no lingering, so a lone worker waits for one
// round trip, and a crowd shares one.
func loop[T any](b *batcher, ch chan T, flush func([]T)) {
	defer b.wg.Done()
	batch := make([]T, 0, maxBatch)
	for {
		select {
		case r := <-ch:
			batch = append(batch[:0], r)
		case <-b.stop:
			for {
				select {
				case r := <-ch:
					flush([]T{r})
				default:
					return
				}
			}
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case r := <-ch:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		flushSplit(batch, flush)
	}
}

// splitAt is the batch size from which a flush is cut in two halves
// written at once on two connections: one statement runs on one core of
// the database, and a hundred workers' batches kept one core busy while
// the other idled (docs/BENCHMARKS.md). Each half is a batch as any other
// (its own transaction; its rows are other effects than the other half's).
const splitAt = 32

func flushSplit[T any](batch []T, flush func([]T)) {
	if len(batch) < splitAt {
		flush(batch)
		return
	}
	half := len(batch) / 2
	var wg sync.WaitGroup
	wg.Go(func() { flush(batch[:half]) })
	flush(batch[half:])
	wg.Wait()
}

// failed says, at most every ten seconds, that a whole batch failed and
// its requests took the one-row path: correct, but slower, and a sign of
// something to look at (the database, a rule a row broke) when it lasts.
func (b *batcher) failed(step string, n int, err error) {
	now := time.Now().UnixNano()
	last := b.lastWarn.Load()
	if now-last < int64(10*time.Second) || !b.lastWarn.CompareAndSwap(last, now) {
		return
	}
	b.logger.Warn("a group commit failed; its effects are written one at a time", "step", step, "effects", n, "err", err)
}

// bg is the context of a flush: a worker's cancelled context must not
// cancel the write of other workers' rows.
var bg = context.Background()

// targets reads the targets first … first+count-1 of a list, addresses and
// variables, through the target batch: the read every effect makes before
// it renders its message (a job carrying a range of targets makes it once
// for all of them), one statement for all the workers waiting, instead of
// one each. A target missing from the list is pgx.ErrNoRows in its place.
func (b *batcher) targets(ctx context.Context, listID int64, first, count int) ([]targetRes, error) {
	b.start()
	r := &targetReq{listID: listID, first: first, count: max(count, 1), done: make(chan targetsRes, 1)}
	select {
	case b.targetReqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-r.done:
		return res.targets, res.err
	case <-ctx.Done(): // a read: nothing to own if we leave early
		return nil, ctx.Err()
	}
}

func (b *batcher) flushTargets(reqs []*targetReq) {
	byList := map[int64][]*targetReq{}
	for _, r := range reqs {
		byList[r.listID] = append(byList[r.listID], r)
	}
	for list, rs := range byList {
		var ordinals []int32
		for _, r := range rs {
			for o := r.first; o < r.first+r.count; o++ {
				ordinals = append(ordinals, int32(o))
			}
		}
		// One list per statement: the plan's read (plan.TargetsAt).
		read, err := plan.TargetsAt(bg, b.pool, list, ordinals)
		got := make(map[int]targetRes, len(read))
		for _, t := range read {
			got[t.Ordinal] = targetRes{to: t.Address, key: t.Key, vars: t.Vars}
		}
		if err != nil {
			b.failed("target read", len(rs), err)
		}
		for _, r := range rs {
			if err != nil {
				r.done <- targetsRes{err: err}
				continue
			}
			ts := make([]targetRes, r.count)
			for i := range ts {
				t, ok := got[r.first+i]
				if !ok {
					t.err = pgx.ErrNoRows
				}
				ts[i] = t
			}
			r.done <- targetsRes{targets: ts}
		}
	}
}

// claim commits a pending row through the claim batch. won is false when
// the batch did not insert it; the caller then takes the one-row path.
func (b *batcher) claim(ctx context.Context, cr ledger.ClaimRequest) (ledger.Effect, bool, error) {
	b.start()
	r := &claimReq{r: cr, done: make(chan claimRes, 1)}
	select {
	case b.claims <- r:
	case <-ctx.Done():
		return ledger.Effect{}, false, ctx.Err()
	}
	// Once queued, wait for the answer whatever ctx does: the row may be
	// committed, and the caller must know it owns it.
	res := <-r.done
	return res.eff, res.won, res.err
}

func (b *batcher) flushClaims(reqs []*claimReq) {
	n := len(reqs)
	crs := make([]ledger.ClaimRequest, n)
	for i, r := range reqs {
		crs[i] = r.r
	}
	effs, err := b.writeLedger.ClaimMany(bg, crs, b.gate)
	if err != nil {
		// The one-row path decides and explains.
		b.failed("claim", n, err)
		effs = nil
	}
	won := wonBy(effs)
	for _, r := range reqs {
		// Not inserted by the batch (won false): the one-row path decides
		// and explains.
		r.done <- won(r.r)
	}
}

// answer commits a raw answer, and the settle p when it is not nil, in one
// commit through the answer batch; with next, the next target's claim in
// the same commit, whose outcome it returns (won false: the batch did not
// insert it; the caller then takes the one-row path).
func (b *batcher) answer(effectID int64, kind ledger.ResponseKind, body []byte, p *ledger.SettleParams, next *ledger.ClaimRequest) (claimRes, error) {
	if body == nil {
		body = []byte{}
	}
	b.start()
	r := &answerReq{a: ledger.Answer{ResponseRecord: ledger.ResponseRecord{EffectID: effectID, Kind: kind, Body: body}, Settle: p}, claim: next, done: make(chan answerRes, 1)}
	b.answers <- r
	res := <-r.done
	return res.next, res.err
}

func (b *batcher) flushAnswers(reqs []*answerReq) {
	as := make([]ledger.Answer, len(reqs))
	var claims []ledger.ClaimRequest
	for i, r := range reqs {
		as[i] = r.a
		if r.claim != nil {
			claims = append(claims, *r.claim)
		}
	}
	ids, effs, err := b.writeLedger.AnswerMany(bg, as, claims, b.gate)
	if err != nil {
		// Rolled back as a whole: each answer alone, its raw bytes first
		// (committed whatever its settle does), then its settle; the
		// claims take the one-row path.
		b.failed("raw answer and settle", len(reqs), err)
		for _, r := range reqs {
			if _, err := b.ledger.RecordResponse(bg, r.a.EffectID, r.a.Kind, r.a.Body); err != nil || r.a.Settle == nil {
				r.done <- answerRes{err: err}
				continue
			}
			_, err := b.ledger.Settle(bg, *r.a.Settle)
			r.done <- answerRes{err: err}
		}
		return
	}
	got := map[int64]bool{}
	for _, id := range ids {
		got[id] = true
	}
	won := wonBy(effs)
	for _, r := range reqs {
		var res answerRes
		if r.claim != nil {
			res.next = won(*r.claim)
		}
		if r.a.Settle != nil && !got[r.a.EffectID] {
			// The answer is committed; the settle missed its row: settle
			// it alone, for its own answer.
			_, res.err = b.ledger.Settle(bg, *r.a.Settle)
		}
		r.done <- res
	}
}

// wonBy returns a function that says whether the batch that inserted effs
// claimed a request's key for that request (its owner and job).
func wonBy(effs []ledger.Effect) func(ledger.ClaimRequest) claimRes {
	won := map[string]ledger.Effect{}
	for _, e := range effs {
		won[string(e.Key)] = e
	}
	return func(cr ledger.ClaimRequest) claimRes {
		if e, ok := won[string(cr.Key)]; ok && cr.Won(e) {
			delete(won, string(cr.Key))
			return claimRes{eff: e, won: true}
		}
		return claimRes{}
	}
}

// settle commits a verdict through the settle batch.
func (b *batcher) settle(p ledger.SettleParams) error {
	b.start()
	r := &settleReq{p: p, done: make(chan error, 1)}
	b.settles <- r
	return <-r.done
}

func (b *batcher) flushSettles(reqs []*settleReq) {
	ps := make([]ledger.SettleParams, len(reqs))
	for i, r := range reqs {
		ps[i] = r.p
	}
	ids, err := b.writeLedger.SettleMany(bg, ps)
	got := map[int64]bool{}
	for _, id := range ids {
		got[id] = true
	}
	if err != nil {
		b.failed("settle", len(reqs), err)
	}
	for _, r := range reqs {
		if got[r.p.EffectID] && err == nil {
			r.done <- nil
			continue
		}
		// The batch failed (one row broke a rule) or missed this row:
		// settle it alone, for its own answer.
		_, serr := b.ledger.Settle(bg, r.p)
		r.done <- serr
	}
}
