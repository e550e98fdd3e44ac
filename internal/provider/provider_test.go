package provider_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
)

func TestEffectIDAndMessageID(t *testing.T) {
	t.Parallel()
	key := "v1:" + "ab" + "0000000000000000000000000000000000000000000000000000000000000000"[:62]
	require.Equal(t, key+":0", provider.EffectID(key, 0))
	require.Equal(t, key+":3", provider.EffectID(key, 3))

	id := provider.MessageID(key, 0)
	require.Regexp(t, `^<[0-9a-f]{32}@onceplan>$`, id)
	require.Equal(t, id, provider.MessageID(key, 0), "deterministic")
	require.NotEqual(t, id, provider.MessageID(key, 1), "a bumped epoch is a new message")

	name := provider.MaildirFileName(key, 0)
	require.Regexp(t, `^[0-9a-f]{40}\.onceplan$`, name)
	require.Equal(t, id[1:33], name[:32], "both derive from SHA-256(EffectID)")
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := provider.Parse("outbox", "maildir://"+dir+"/a")
	require.NoError(t, err)
	b, err := provider.Parse("archive", "maildir://"+dir+"/b")
	require.NoError(t, err)
	a2, err := provider.Parse("outbox", "maildir://"+dir+"/c")
	require.NoError(t, err)

	_, err = provider.NewRegistry(a, b, a2)
	require.EqualError(t, err, `provider "outbox" is configured twice`)

	r, err := provider.NewRegistry(a, b)
	require.NoError(t, err)
	require.Equal(t, []string{"archive", "outbox"}, r.Names())
	got, ok := r.Get("outbox")
	require.True(t, ok)
	require.Same(t, a, got)
	_, ok = r.Get("nope")
	require.False(t, ok)
	require.NoError(t, r.Close())
}

func TestAcquireConcurrency(t *testing.T) {
	t.Parallel()
	p, err := provider.Parse("outbox", "maildir://"+t.TempDir()+"?concurrency=2")
	require.NoError(t, err)
	defer p.Close()

	rel1, err := p.Acquire(context.Background())
	require.NoError(t, err)
	rel2, err := p.Acquire(context.Background())
	require.NoError(t, err)

	// Both slots are taken: a third caller waits until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = p.Acquire(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A release frees a slot for the next caller; releasing twice is harmless
	// and does not free a second slot.
	rel1()
	rel1()
	done := make(chan func(), 1)
	go func() {
		rel, err := p.Acquire(context.Background())
		if err != nil {
			close(done)
			return
		}
		done <- rel
	}()
	rel3 := await.Recv(t, done, time.Minute, "the freed slot going to the next caller")
	require.NotNil(t, rel3)

	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = p.Acquire(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the double release freed nothing")
	rel2()
	rel3()

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = p.Acquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestAcquireRate(t *testing.T) {
	t.Parallel()
	// One per hour: the first Acquire gets the bucket's single token, the
	// second cannot get one before its context's deadline.
	p, err := provider.Parse("slow", "maildir://"+t.TempDir()+"?rate=1/h")
	require.NoError(t, err)
	defer p.Close()
	rel, err := p.Acquire(context.Background())
	require.NoError(t, err)
	rel()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = p.Acquire(ctx)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
}

// TestRenewKeepsTheSlotOnlyWithATokenNow: a slot is kept for another call
// (a job's next target) only when the rate limit has a token at once —
// Renew never waits — and keeping it holds the concurrency bound: no other
// caller gets a slot meanwhile.
func TestRenewKeepsTheSlotOnlyWithATokenNow(t *testing.T) {
	t.Parallel()
	unlimited, err := provider.Parse("outbox", "maildir://"+t.TempDir()+"?concurrency=1")
	require.NoError(t, err)
	defer unlimited.Close()
	rel, err := unlimited.Acquire(context.Background())
	require.NoError(t, err)
	for range 3 {
		require.True(t, unlimited.Renew(), "no rate limit: the slot is always kept")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = unlimited.Acquire(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the kept slot is still taken")
	rel()

	limited, err := provider.Parse("outbox", "maildir://"+t.TempDir()+"?rate=1/s&concurrency=1")
	require.NoError(t, err)
	defer limited.Close()
	rel, err = limited.Acquire(context.Background())
	require.NoError(t, err)
	defer rel()
	start := time.Now()
	require.False(t, limited.Renew(), "the token was just taken: no second call this second")
	require.Less(t, time.Since(start), 500*time.Millisecond, "Renew does not wait for the next token, a second away")
}
