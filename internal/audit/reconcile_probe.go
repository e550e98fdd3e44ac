package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/provider"
)

// ProbeOpts asks [Reconcile] to probe the provider for every target whose
// newest attempt is done, pending or unknown.
type ProbeOpts struct {
	// Provider is the campaign's provider; it must be able to probe.
	Provider provider.Provider
	// Rate caps probes per second, on top of the provider's own rate limit
	// (0: the provider's limit alone).
	Rate float64
	// Concurrency is how many probes run at once (default 4); the
	// provider's own concurrency bound applies as well.
	Concurrency int
}

// startProbes starts the probing goroutines.
func (r *reconciler) startProbes(ctx context.Context, o ProbeOpts) error {
	if o.Provider == nil {
		return errors.New("probing needs a provider")
	}
	if !o.Provider.Capabilities().Probe {
		return &noProbeError{name: o.Provider.Name(), kind: o.Provider.Kind()}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	r.probe = &o
	r.rep.Probe = &ProbeSummary{Provider: o.Provider.Name()}
	if o.Rate > 0 {
		r.limit = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	r.jobs = make(chan probeJob, o.Concurrency)
	for range o.Concurrency {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for j := range r.jobs {
				res, err := r.probeOne(ctx, j.s.t)
				if err != nil && ctx.Err() != nil {
					r.mu.Lock()
					if r.probeErr == nil {
						r.probeErr = ctx.Err()
					}
					r.mu.Unlock()
					continue
				}
				r.mu.Lock()
				r.rep.Probe.Probed++
				p := probed{verdict: "not found", provider: o.Provider.Name()}
				switch {
				case err != nil:
					r.rep.Probe.Errors++
					p.verdict = "error: " + oneLine(err.Error())
				case res.Found:
					r.rep.Probe.Found++
					p.verdict, p.matches = "found", res.Count()
					if p.matches > 1 {
						r.rep.Probe.Duplicated++
					}
				default:
					r.rep.Probe.NotFound++
				}
				r.mu.Unlock()
				r.judge(j.s, p)
			}
		}()
	}
	return nil
}

func (r *reconciler) probeOne(ctx context.Context, t TargetRow) (provider.ProbeResult, error) {
	if r.limit != nil {
		if err := r.limit.Wait(ctx); err != nil {
			return provider.ProbeResult{}, err
		}
	}
	release, err := r.probe.Provider.Acquire(ctx)
	if err != nil {
		return provider.ProbeResult{}, err
	}
	defer release()
	return r.probe.Provider.Probe(ctx, t.Key, t.Epoch)
}

// noProbeError refuses to probe a provider that cannot be asked; it
// wraps provider.ErrNoProbe.
type noProbeError struct{ name, kind string }

func (e *noProbeError) Error() string {
	return fmt.Sprintf("provider %s (%s) cannot be probed", e.name, e.kind)
}

func (e *noProbeError) Unwrap() error { return provider.ErrNoProbe }

// stopProbes waits for the probes in flight.
func (r *reconciler) stopProbes() error {
	if r.jobs == nil {
		return nil
	}
	close(r.jobs)
	r.wg.Wait()
	return r.probeErr
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
