package web

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
)

// A stranger's failed sign-ins from one address do not keep the owner out
// from another, and each throttled attempt is logged without the password.
func TestSignInThrottleIsPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs bytes.Buffer
	srv := NewServer(Config{Pool: b.pool, Approval: b.svc, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	csrf := randomToken(32)
	try := func(remoteAddr, email, password string) *httptest.ResponseRecorder {
		req := httpPost("/login", url.Values{"csrf_token": {csrf}, "email": {email}, "password": {password}})
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
		req.RemoteAddr = remoteAddr
		return httptestDo(srv.Handler(), req)
	}
	const stranger, owner = "203.0.113.50:40000", "198.51.100.8:50000"
	for range auth.FailuresBeforeDelay {
		require.Equal(t, http.StatusUnauthorized, try(stranger, "admin@example.com", "stranger's guess").Code)
	}
	rec := try(stranger, " Admin@example.com", "stranger's last guess")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Contains(t, tid(parse(t, rec), "error").Text(), "try again in 1 minute")

	rec = try(owner, "admin@example.com", testPassword)
	require.Equal(t, http.StatusSeeOther, rec.Code, "the owner signs in from another address")
	require.Equal(t, "/campaigns", rec.Header().Get("Location"))

	// One log line, for the one throttled attempt: the email as typed, the
	// address and the wait; never a password.
	var lines []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if m["msg"] == "sign-in throttled" {
			lines = append(lines, m)
		}
	}
	require.Len(t, lines, 1, logs.String())
	require.Equal(t, " Admin@example.com", lines[0]["email"])
	require.Equal(t, "203.0.113.50", lines[0]["ip"])
	wait, err := time.ParseDuration(lines[0]["wait"].(string))
	require.NoError(t, err)
	require.InDelta(t, auth.FirstDelay.Seconds(), wait.Seconds(), 30)
	require.Equal(t, "account", lines[0]["scope"])
	require.NotEmpty(t, lines[0]["request_id"])
	require.NotContains(t, logs.String(), "guess")
	require.NotContains(t, logs.String(), testPassword)
}
