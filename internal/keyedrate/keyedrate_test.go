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

// TestClientKeyGroupsIPv6ByNetwork: an IPv6 client is its /64, an
// IPv4-mapped address its IPv4 address; Clients counts by that key, so
// the addresses of one /64 share one allowance.
func TestClientKeyGroupsIPv6ByNetwork(t *testing.T) {
	for ip, want := range map[string]string{
		"192.0.2.7":               "192.0.2.7",
		"::ffff:192.0.2.7":        "192.0.2.7",
		"2001:db8:1:2::1":         "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::9":    "2001:db8:1:2::/64",
		"fe80::1%eth0":            "fe80::/64",
		"not an address":          "not an address",
		"":                        "",
		"2001:db8:1:3:aaaa::bbbb": "2001:db8:1:3::/64",
	} {
		require.Equal(t, want, ClientKey(ip), ip)
	}
	now := time.Now()
	c := NewClients(rate.Every(time.Minute), 2, 0)
	require.True(t, c.AllowAt("2001:db8:1:2::1", now))
	require.True(t, c.AllowAt("2001:db8:1:2::2", now))
	require.False(t, c.AllowAt("2001:db8:1:2:ffff::9", now), "another address of the same /64 shares the burst")
	require.True(t, c.AllowAt("2001:db8:1:3::1", now), "another /64 is another client")
}
