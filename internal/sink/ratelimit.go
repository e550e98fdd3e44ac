package sink

import (
	"math"
	"strconv"
	"sync"

	"golang.org/x/time/rate"
)

// RateLimit is a stand-in's enforced request rate: a service's documented
// limit, opt-in so that other tests stay fast.
type RateLimit struct {
	// PerSecond is how many requests a second the stand-in takes (0: no
	// limit); past it, it answers 429 as the service documents.
	PerSecond float64
	// Burst is how many requests may come at once (0: one second's worth,
	// at least 1).
	Burst int
}

// limitGate applies a RateLimit and counts what it refused.
type limitGate struct {
	mu      sync.Mutex
	lim     *rate.Limiter // nil: no limit
	per     float64
	refused int
}

func newLimitGate(l RateLimit) *limitGate {
	g := &limitGate{per: l.PerSecond}
	if l.PerSecond > 0 {
		burst := l.Burst
		if burst <= 0 {
			burst = max(1, int(math.Ceil(l.PerSecond)))
		}
		g.lim = rate.NewLimiter(rate.Limit(l.PerSecond), burst)
	}
	return g
}

// allow says whether a request arriving now is within the limit; when it
// is not, it counts it and says in how many whole seconds (at least 1)
// the next would be.
func (g *limitGate) allow() (bool, int) {
	if g.lim == nil {
		return true, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.lim.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		g.refused++
		return false, max(1, int(math.Ceil(d.Seconds())))
	}
	return true, 0
}

func (g *limitGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused
}

// providerRateOption is the provider option a stand-in's URL carries: its
// own limit, so a provider built from the URL paces to it; rate=none when
// it has none (the tests that are not about rate limits stay fast).
func providerRateOption(l RateLimit) string {
	if l.PerSecond <= 0 {
		return "rate=none"
	}
	return "rate=" + formatRate(l.PerSecond)
}

func formatRate(perSecond float64) string {
	return strconv.FormatFloat(perSecond, 'f', -1, 64) + "/s"
}
