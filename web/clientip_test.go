package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/web/webhook"
)

// TestOpenRoutesCountAnIPv6NetworkAsOneClient: the routes open without
// sign-in — the unsubscribe links and the webhooks, mounted as serve
// mounts them — count an IPv6 client by its /64, as the sign-in throttle
// does (keyedrate.ClientKey): requests from ever new addresses of one /64
// are limited together, and another /64 is served meanwhile.
func TestOpenRoutesCountAnIPv6NetworkAsOneClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg, err := provider.NewRegistry()
	require.NoError(t, err)
	srv := NewServer(Config{Pool: b.pool, Approval: b.svc, Providers: reg, Mount: func(e *echo.Echo) {
		webhook.Register(e, webhook.Config{Pool: b.pool})
	}})
	send := func(method, path, from string) int {
		var req *http.Request
		if method == http.MethodPost {
			req = httptest.NewRequest(method, path, strings.NewReader("List-Unsubscribe=One-Click"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req = httptest.NewRequest(method, path, nil)
		}
		req.RemoteAddr = from
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	for _, door := range []struct {
		method, path string
		served       int // the answer while not limited
	}{
		{http.MethodGet, "/u/x", http.StatusBadRequest},          // a malformed link: refused, after the limit
		{http.MethodPost, "/webhooks/nope", http.StatusNotFound}, // a kind not configured: likewise
	} {
		name := door.method + " " + door.path
		limitedAfter := 0
		for i := 1; i <= 5000 && limitedAfter == 0; i++ {
			// Each request from an address of 2001:db8:1:2::/64 never used
			// before: counted one by one, none would ever be limited.
			switch code := send(door.method, door.path, fmt.Sprintf("[2001:db8:1:2:%x:%x::1]:4000", i>>16, i&0xffff)); code {
			case http.StatusTooManyRequests:
				limitedAfter = i
			default:
				require.Equal(t, door.served, code, "%s, request %d", name, i)
			}
		}
		require.NotZero(t, limitedAfter, "%s: 5000 addresses of one /64 were never limited together", name)
		require.Equal(t, door.served, send(door.method, door.path, "[2001:db8:1:3::1]:4000"), "%s: another /64 is another client", name)
		t.Logf("%s: the /64 was limited at its request %d", name, limitedAfter)
	}
}
