package provider

import "context"

// SendOne sends one message outside the ledger (a test send, a
// notification): it waits for p's rate limit and a concurrency slot — the
// same ones the campaigns on p share — sends r and classifies the answer.
// It never fails: a slot not found before ctx ends, or a send that could
// not even start, is a failed verdict saying so, with no raw answer.
func SendOne(ctx context.Context, p Provider, r Request) (Verdict, []byte) {
	release, err := p.Acquire(ctx)
	if err != nil {
		return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: "the provider was busy for too long: " + err.Error()}, nil
	}
	raw, err := p.Send(ctx, r)
	release()
	if err != nil {
		return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: "not sent: " + err.Error()}, nil
	}
	return p.Classify(raw), raw
}
