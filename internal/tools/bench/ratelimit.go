package main

// Scenario "ratelimit": a campaign through each service stand-in
// (internal/sink's Resend and Postmark) with the service's rate limit
// enforced at the stand-in: past it, it answers 429. The limit is the one
// the provider paces itself to by default (provider.DefaultResendRate,
// Resend's documented 2 requests/s per team; provider.DefaultPostmarkRate,
// an assumption), and the stand-in's provider URL says the same rate.
// For each service, a real `onceplan worker`:
//
//   - batched (batch=100): N targets, timed from the process's start until
//     the stand-in holds all N, against the least time the limit allows,
//     N ÷ 100 ÷ requests per second;
//   - unbatched (one message per call): a campaign of the same size for a
//     fixed time (-ratelimit-unbatched), then stopped; its messages per
//     second are the messages the stand-in received in that time.
//
// Messages are counted at the stand-in, by the time it received each, not
// in the ledger; the 429s are the stand-in's own count. A door in front of
// each stand-in records when each call arrived and what it was answered,
// so that the batched run's time can be taken apart: the start-up, the
// pace itself, and the time lost between calls (after a 429, or with no
// call ready at its turn).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
)

// ratelimitBatch is the batched side's batch=: a call carries at most one
// job's targets, and a job at most jobs.MaxTargetsPerJob.
const ratelimitBatch = jobs.MaxTargetsPerJob

// ratelimitStall is how long the batched side may go without a new
// message at the stand-in before the run is reported as stalled rather
// than waited for: longer than any pause the providers take on their own
// after a 429 (Postmark's backoff stops doubling at 60 s).
const ratelimitStall = 2 * time.Minute

var (
	ratelimitServices  = flag.String("ratelimit-services", "resend,postmark", "the service stand-ins the ratelimit scenario sends through: resend, postmark")
	ratelimitTargets   = flag.Int("ratelimit-targets", 20_000, "targets of each campaign in the ratelimit scenario")
	ratelimitUnbatched = flag.Duration("ratelimit-unbatched", 3*time.Minute, "how long the ratelimit scenario sends unbatched through each service before it stops and counts")
	// ratelimitWorkers is both the worker's --workers-per-queue and the
	// workers the campaigns' jobs are sized for (jobs.Enqueuer's
	// WorkersPerQueue), as in production, where both are the default.
	ratelimitWorkers = flag.Int("ratelimit-workers", jobs.DefaultWorkersPerQueue, "workers per queue of the ratelimit scenario's `onceplan worker` (--workers-per-queue), which the campaigns' jobs are sized for")
)

// standIn is one service stand-in of the scenario, started with its rate
// limit enforced, behind a door that records its calls.
type standIn struct {
	service string  // "Resend", "Postmark"
	rate    float64 // requests per second, enforced and paced to
	url     string  // the provider URL (with rate=), through the door
	door    *door
	// arrivals are the times the stand-in received each message it
	// holds; recipients counts them per recipient.
	arrivals   func() []time.Time
	recipients func() map[string]int
	refused    func() int // requests answered 429 for the rate limit
	close      func()
}

// door is a reverse proxy in front of a stand-in that records each
// call's arrival and answer.
type door struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []doorCall
}

// doorCall is one POST through the door.
type doorCall struct {
	at     time.Time // when it arrived
	path   string
	size   int // the request body's length
	status int // what the stand-in answered
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func newDoor(endpoint string) (*door, error) {
	target, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A call the stand-in does not answer is a 502 in the door's log.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	d := &door{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		at := time.Now()
		sw := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
		proxy.ServeHTTP(sw, r)
		if r.Method == http.MethodPost {
			d.mu.Lock()
			d.calls = append(d.calls, doorCall{at: at, path: r.URL.Path, size: int(r.ContentLength), status: sw.status})
			d.mu.Unlock()
		}
	}))
	return d, nil
}

// through returns the stand-in's provider URL u with its endpoint
// (stand-in's base URL) replaced by the door's.
func (d *door) through(u, endpoint string) (string, error) {
	escaped := url.QueryEscape(endpoint)
	if !strings.Contains(u, escaped) {
		return "", fmt.Errorf("the provider URL %q does not name the stand-in's endpoint %s", u, endpoint)
	}
	return strings.Replace(u, escaped, url.QueryEscape(d.srv.URL), 1), nil
}

// answers counts calls by path and status: "POST /emails/batch 200
// ×198, 429 ×2".
func answers(calls []doorCall) string {
	byPath := map[string]map[int]int{}
	for _, c := range calls {
		if byPath[c.path] == nil {
			byPath[c.path] = map[int]int{}
		}
		byPath[c.path][c.status]++
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(byPath)) {
		var st []string
		for _, s := range slices.Sorted(maps.Keys(byPath[p])) {
			st = append(st, fmt.Sprintf("%d ×%d", s, byPath[p][s]))
		}
		out = append(out, "POST "+p+" "+strings.Join(st, ", "))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// log returns the calls so far, in order of arrival.
func (d *door) log() []doorCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.calls)
	slices.SortFunc(out, func(a, b doorCall) int { return a.at.Compare(b.at) })
	return out
}

func newResendStandIn() (*standIn, error) {
	s := sink.NewResend(sink.ResendOpts{Limit: sink.RateLimit{PerSecond: provider.DefaultResendRate}})
	in := &standIn{
		service: "Resend", rate: provider.DefaultResendRate,
		arrivals: func() []time.Time {
			var at []time.Time
			for _, e := range s.Effects() {
				at = append(at, e.At)
			}
			return at
		},
		recipients: s.CountByRecipient, refused: s.RateLimited, close: s.Close,
	}
	return in.behind(s.URL(), s.Endpoint())
}

func newPostmarkStandIn() (*standIn, error) {
	s := sink.NewPostmark(sink.PostmarkOpts{Limit: sink.RateLimit{PerSecond: provider.DefaultPostmarkRate}})
	in := &standIn{
		service: "Postmark", rate: provider.DefaultPostmarkRate,
		arrivals: func() []time.Time {
			var at []time.Time
			for _, m := range s.Messages() {
				at = append(at, m.ReceivedAt)
			}
			return at
		},
		recipients: s.CountByRecipient, refused: s.RateLimited, close: s.Close,
	}
	return in.behind(s.URL(), s.Endpoint())
}

// behind puts the stand-in, whose provider URL is u and base URL
// endpoint, behind a door.
func (in *standIn) behind(u, endpoint string) (*standIn, error) {
	d, err := newDoor(endpoint)
	if err != nil {
		in.close()
		return nil, err
	}
	if in.url, err = d.through(u, endpoint); err != nil {
		d.srv.Close()
		in.close()
		return nil, err
	}
	in.door = d
	stop := in.close
	in.close = func() { d.srv.Close(); stop() }
	return in, nil
}

// rateRun is one worker's run through one stand-in.
type rateRun struct {
	n              int           // targets of the campaign
	messages       int           // at the stand-in (batched: all n unless stalled; unbatched: within the window)
	first, last    time.Duration // from the process's start until the stand-in received the first, the last of them
	window         time.Duration // unbatched: how long it sent
	settled        time.Duration // batched: until every effect was settled done in the ledger (0: stalled)
	stalled        string        // batched: why the run was given up ("" when it completed)
	calls          []doorCall    // every call, from the door's log
	start          time.Time     // the worker's start
	refused        int           // the stand-in's count of 429s
	extra, missing int           // recipients with more than one message, with none
	jobSizes       []int         // targets per job of the campaign, smallest and largest
}

func (r rateRun) perSecond() float64 {
	if r.window > 0 {
		return float64(r.messages) / r.window.Seconds()
	}
	return float64(r.messages) / r.last.Seconds()
}

// paceBreakdown takes a batched run's calls apart, against the pace of
// one call every interval: from the start until the first call; the pace
// itself, (calls − 1) × interval; the time lost between calls beyond the
// pace, after a 429 and otherwise (no call ready at its turn); and the
// time gained where calls came closer than the pace. closest is the least
// gap between two calls; early the calls that came less than half an
// interval after the one before.
type paceBreakdown struct {
	first, pace, afterRefusal, notReady, gained, closest time.Duration
	calls, refused, early                                int
}

func breakdown(start time.Time, calls []doorCall, interval time.Duration) paceBreakdown {
	var b paceBreakdown
	b.calls = len(calls)
	if len(calls) == 0 {
		return b
	}
	b.first = calls[0].at.Sub(start)
	b.pace = time.Duration(len(calls)-1) * interval
	b.closest = -1
	for i, c := range calls {
		if c.status == http.StatusTooManyRequests {
			b.refused++
		}
		if i == 0 {
			continue
		}
		gap := c.at.Sub(calls[i-1].at)
		if b.closest < 0 || gap < b.closest {
			b.closest = gap
		}
		if gap < interval/2 {
			b.early++
		}
		switch d := gap - interval; {
		case d < 0:
			b.gained -= d
		case calls[i-1].status == http.StatusTooManyRequests:
			b.afterRefusal += d
		default:
			b.notReady += d
		}
	}
	return b
}

func (b paceBreakdown) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("%d calls, first after %s; the pace (calls − 1) × interval %s; lost between calls after a 429 %s, with no call ready at its turn %s; gained by calls closer than the pace %s (closest %s; %d less than half an interval apart); 429s at the door %d",
		b.calls, r(b.first), r(b.pace), r(b.afterRefusal), r(b.notReady), r(b.gained), r(max(b.closest, 0)), b.early, b.refused)
}

// ratelimitCampaign creates and starts a campaign of n targets on
// providerName, its jobs sized for workers workers, and returns its ids,
// its jobs' smallest and largest target counts, and the service that
// started it.
func ratelimitCampaign(ctx context.Context, pool *pgxpool.Pool, name, providerName string, n, workers int) (string, int64, []int, *approval.Service, error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return "", 0, nil, nil, err
	}
	enq := jobs.NewEnqueuer(client)
	enq.WorkersPerQueue = workers
	svc := approval.NewService(pool, enq)
	id, planID, err := startCampaign(ctx, pool, svc, name, providerName, n)
	if err != nil {
		return "", 0, nil, nil, err
	}
	var smallest, largest int
	if err := pool.QueryRow(ctx, `SELECT coalesce(min(c), 0), coalesce(max(c), 0) FROM (
		SELECT coalesce((args ->> 'count')::int, 1) AS c FROM river_job
		WHERE kind = 'onceplan_effect' AND (args ->> 'plan_id')::bigint = $1) j`, planID).Scan(&smallest, &largest); err != nil {
		return "", 0, nil, nil, err
	}
	return id, planID, []int{smallest, largest}, svc, nil
}

// ratelimitRun runs one `onceplan worker` with the provider at the
// stand-in's URL (batch=batch when batch > 0) on a new campaign of n
// targets. With window > 0 it stops the worker after that long and counts
// what the stand-in received within it; otherwise it waits until the
// stand-in holds all n and every effect is settled done, or until
// ratelimitStall passes without a new message. A campaign left unfinished
// is cancelled.
func ratelimitRun(ctx context.Context, pool *pgxpool.Pool, e *procEnv, s *standIn, providerName string, n, batch, workers int, window time.Duration) (rateRun, error) {
	id, planID, sizes, svc, err := ratelimitCampaign(ctx, pool, "ratelimit bench "+providerName, providerName, n, workers)
	if err != nil {
		return rateRun{}, err
	}
	u := s.url
	if batch > 0 {
		u = sink.WithOption(u, fmt.Sprintf("batch=%d", batch))
	}
	if err := quiesce(ctx, pool); err != nil {
		return rateRun{}, err
	}
	start := time.Now()
	w, err := e.start(providerName, "worker", "--database-url", e.dbURL, "--data-dir", filepath.Join(e.dir, "data-"+providerName),
		"--workers-per-queue", fmt.Sprint(workers), "--provider", providerName+"="+u)
	if err != nil {
		return rateRun{}, err
	}
	defer w.stop()
	r := rateRun{n: n, jobSizes: sizes, window: window, start: start}
	timeout := max(30*time.Minute, window+time.Minute)
	held, grew := 0, start
	for {
		at := s.arrivals()
		if len(at) > held {
			held, grew = len(at), time.Now()
		}
		if window > 0 && time.Since(start) >= window || window == 0 && held >= n {
			break
		}
		if window == 0 && time.Since(grew) > ratelimitStall {
			r.stalled = fmt.Sprintf("no new message at the stand-in for %s, %s of %s there", ratelimitStall, thousands(held), thousands(n))
			break
		}
		if w.exited() {
			return rateRun{}, fmt.Errorf("%s: the worker exited with %d of %d messages at the stand-in:\n%s", providerName, held, n, w.tail())
		}
		if time.Since(start) > timeout {
			return rateRun{}, fmt.Errorf("%s: %d of %d messages at the stand-in after %s", providerName, held, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if window > 0 {
		w.stop()
	}
	at := s.arrivals()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if window > 0 {
		at = slices.DeleteFunc(at, func(t time.Time) bool { return t.Sub(start) > window })
	}
	r.messages = len(at)
	if len(at) > 0 {
		r.first, r.last = at[0].Sub(start), at[len(at)-1].Sub(start)
	}
	if window == 0 && r.stalled == "" {
		for {
			d, err := doneCount(ctx, pool, planID)
			if err != nil {
				return rateRun{}, err
			}
			if d >= n {
				break
			}
			if w.exited() {
				return rateRun{}, fmt.Errorf("%s: the worker exited with %d of %d effects done:\n%s", providerName, d, n, w.tail())
			}
			if time.Since(start) > timeout {
				return rateRun{}, fmt.Errorf("%s: %d of %d effects done after %s", providerName, d, n, timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.settled = time.Since(start)
	}
	w.stop()
	if r.stalled != "" {
		states, err := effectStates(ctx, pool, planID)
		if err != nil {
			return rateRun{}, err
		}
		r.stalled += "; the ledger: " + states + "; the worker's last error: " + lastError(w.log)
	}
	if window > 0 || r.stalled != "" {
		// What is left of it would stay in every gate's view of the
		// scenarios after this one.
		operator, err := user(ctx, pool, "run-approver@example.com", auth.RoleApprover, auth.RoleOperator)
		if err != nil {
			return rateRun{}, err
		}
		if _, err := svc.Cancel(ctx, operator, id, "the ratelimit bench's run ended"); err != nil {
			return rateRun{}, fmt.Errorf("%s: cancelling the campaign: %w", providerName, err)
		}
	}
	r.calls, r.refused = s.door.log(), s.refused()
	if window > 0 {
		r.calls = slices.DeleteFunc(r.calls, func(c doorCall) bool { return c.at.Sub(start) > window })
	}
	r.missing, r.extra = recipientTally(s.recipients(), n)
	return r, nil
}

// effectStates is the plan's effects counted by state, "done 19,800,
// failed 200".
func effectStates(ctx context.Context, pool *pgxpool.Pool, planID int64) (string, error) {
	rows, err := pool.Query(ctx, `SELECT state::text, count(*) FROM effect WHERE plan_id = $1 GROUP BY 1 ORDER BY 1`, planID)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			state string
			n     int
		)
		if err := rows.Scan(&state, &n); err != nil {
			return "", err
		}
		out = append(out, state+" "+thousands(n))
	}
	return strings.Join(out, ", "), rows.Err()
}

// lastError is the error of the last line of a process's JSON log that
// has one, or "none".
func lastError(logPath string) string {
	b, _ := os.ReadFile(logPath)
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if _, v, ok := strings.Cut(lines[i], `"error":"`); ok {
			if end := strings.Index(v, `","`); end >= 0 {
				v = v[:end]
			}
			return strings.ReplaceAll(v, `\"`, `"`)
		}
	}
	return "none"
}

func benchRateLimit(ctx context.Context, pool *pgxpool.Pool, e *procEnv, n int, window time.Duration, workers int) error {
	fmt.Printf("ratelimit: %s targets per campaign through each service stand-in at its rate limit (enforced: 429 past it), `onceplan worker --workers-per-queue %d` (the campaigns' jobs sized for %d); batched (batch=%d) until all are at the stand-in, unbatched for %s\n",
		thousands(n), workers, workers, ratelimitBatch, window)
	var figures []string
	met := true
	standIns := map[string]func() (*standIn, error){"resend": newResendStandIn, "postmark": newPostmarkStandIn}
	for _, name := range strings.Split(*ratelimitServices, ",") {
		mk := standIns[strings.TrimSpace(name)]
		if mk == nil {
			return fmt.Errorf("-ratelimit-services: %q is not resend or postmark", name)
		}
		var (
			runs    [2]rateRun
			service string
			rate    float64
		)
		for i, batch := range []int{ratelimitBatch, 0} {
			s, err := mk()
			if err != nil {
				return err
			}
			service, rate = s.service, s.rate
			name, win := strings.ToLower(s.service)+"_batched", time.Duration(0)
			if batch == 0 {
				name, win = strings.ToLower(s.service)+"_unbatched", window
			}
			r, err := ratelimitRun(ctx, pool, e, s, name, n, batch, workers, win)
			s.close()
			if err != nil {
				return fmt.Errorf("ratelimit: %w", err)
			}
			runs[i] = r
		}
		b, u := runs[0], runs[1]
		interval := time.Duration(float64(time.Second) / rate)
		least := time.Duration(float64(n) / ratelimitBatch * float64(interval))
		ratio := b.last.Seconds() / least.Seconds()
		exact := b.missing == 0 && b.extra == 0 && u.extra == 0
		met = met && b.stalled == "" && ratio <= 1.2 && exact
		bd := breakdown(b.start, b.calls, interval)
		fmt.Printf("  %s, %s requests/s enforced and paced to; jobs of %d–%d targets:\n", service, fmtRate(rate), b.jobSizes[0], b.jobSizes[1])
		if b.stalled != "" {
			fmt.Printf("    batched:   STALLED: %s\n", b.stalled)
			fmt.Printf("    batched:   %s messages, the last after %s; 429s %d; recipients with more than one %d\n",
				thousands(b.messages), b.last.Round(10*time.Millisecond), b.refused, b.extra)
		} else {
			fmt.Printf("    batched:   %s messages, first after %s, all at the stand-in after %s = %.2fx the least the limit allows (%s); all settled done after %s; %.1f msgs/s; 429s %d; recipients with none / more than one %d / %d\n",
				thousands(b.messages), b.first.Round(10*time.Millisecond), b.last.Round(10*time.Millisecond), ratio, least,
				b.settled.Round(10*time.Millisecond), b.perSecond(), b.refused, b.missing, b.extra)
		}
		fmt.Printf("    batched calls: %s; answers: %s\n", bd, answers(b.calls))
		fmt.Printf("    unbatched: %s messages in %s (first after %s); %.2f msgs/s; 429s %d; recipients with more than one %d; answers: %s\n",
			thousands(u.messages), u.window, u.first.Round(10*time.Millisecond), u.perSecond(), u.refused, u.extra, answers(u.calls))
		fmt.Printf("    batched / unbatched: %.1fx\n", b.perSecond()/u.perSecond())
		batched := fmt.Sprintf("batched %s in **%s = %.2f×** the least (%s), %.1f msgs/s", thousands(n), b.last.Round(100*time.Millisecond), ratio, least, b.perSecond())
		if b.stalled != "" {
			batched = fmt.Sprintf("batched **stalled** (%s), %.1f msgs/s until then", b.stalled, b.perSecond())
		}
		figures = append(figures, fmt.Sprintf("%s at %s requests/s: %s, %d calls, 429s %d; unbatched %.2f msgs/s over %s, 429s %d; batched ÷ unbatched **%.0f×**; recipients with more than one %d",
			service, fmtRate(rate), batched, len(b.calls), b.refused, u.perSecond(), u.window, u.refused, b.perSecond()/u.perSecond(), b.extra+u.extra))
	}
	record("13. rate limits", fmt.Sprintf("%s targets through each service stand-in, its limit enforced, `onceplan worker --workers-per-queue %d` (jobs of up to %d targets), batch=%d, timed from the worker's start; %s",
		thousands(n), workers, jobs.MaxTargetsPerJob, ratelimitBatch, strings.Join(figures, "; ")),
		"batched ≤ 1.2× the least time the limit allows, exactly once", met)
	return nil
}

// fmtRate formats a rate without trailing zeros (2, 10, 0.5).
func fmtRate(r float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", r), "0"), ".")
}
