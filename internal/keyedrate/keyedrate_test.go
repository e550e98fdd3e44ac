package keyedrate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestEachKeyHasItsOwnBucket: one key's burst spent leaves another's
// whole; a refused Take uses up nothing; past MaxKeys the limiter forgets
// and starts afresh.
func TestEachKeyHasItsOwnBucket(t *testing.T) {
	now := time.Now()
	l := New[string](rate.Every(time.Minute), 2, 3)
	require.True(t, l.AllowAt("a", now))
	require.True(t, l.AllowAt("a", now))
	require.False(t, l.AllowAt("a", now), "a's burst is spent")
	require.True(t, l.AllowAt("b", now), "b has a bucket of its own")

	u := New[int64](rate.Every(time.Minute), 1, 0)
	require.Zero(t, u.Take(7))
	wait := u.Take(7)
	require.Greater(t, wait, 50*time.Second)
	require.Greater(t, u.Take(7), 50*time.Second, "a refused take waits no longer than before: it used up nothing")
	require.LessOrEqual(t, u.Take(7), wait)

	l.AllowAt("c", now) // three keys remembered
	l.AllowAt("d", now) // the fourth: all forgotten
	require.True(t, l.AllowAt("a", now), "a starts afresh")
}
