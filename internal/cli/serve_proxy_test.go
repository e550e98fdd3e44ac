package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/pgtest"
)

// reverseProxyEnv, set to a URL, makes the test binary a reverse proxy to
// that URL (TestMain): httputil's, which appends the client's address to
// the X-Forwarded-For it received, as nginx's $proxy_add_x_forwarded_for
// does.
const reverseProxyEnv = "ONCEPLAN_TEST_REVERSE_PROXY"

// runReverseProxy serves on a loopback port it prints, until its standard
// input closes (the test that started it is gone).
func runReverseProxy(target string) int {
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("proxy listening on http://%s\n", ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	http.Serve(ln, httputil.NewSingleHostReverseProxy(u))
	return 0
}

// startReverseProxy runs the test binary as a reverse proxy to target, in
// a process of its own, and returns its URL.
func startReverseProxy(t *testing.T, target string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), reverseProxyEnv+"="+target)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(s), "proxy listening on ")
		require.True(t, ok, "the reverse proxy said %q, not where it listens", s)
		return addr
	case <-time.After(30 * time.Second):
		t.Fatal("the reverse proxy process did not say where it listens within 30 s")
		return ""
	}
}

// from is an HTTP client whose connections come from the loopback
// address src (127.0.0.0/8 is all loopback on Linux): one person, as the
// proxy and the server see them. It follows no redirect.
func from(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// signIn posts the sign-in form (with a pre-session CSRF token of its
// own, as the form issues one), optionally with a forged X-Forwarded-For,
// and returns the status and whether a session cookie came back.
func signIn(t *testing.T, c *http.Client, base, email, password, forged string) (int, bool) {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	csrf := base64.RawURLEncoding.EncodeToString(b)
	form := url.Values{"csrf_token": {csrf}, "email": {email}, "password": {password}}
	req, err := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "onceplan_csrf", Value: csrf})
	if forged != "" {
		req.Header.Set("X-Forwarded-For", forged)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	for _, ck := range resp.Cookies() {
		if ck.Name == "onceplan_session" && ck.Value != "" {
			return resp.StatusCode, true
		}
	}
	return resp.StatusCode, false
}

// limited sends method url from c until an answer is 429, from 8
// goroutines at once (faster than the limits refill even on a busy
// machine), at most n requests in all, and reports whether it came.
func limited(t *testing.T, c *http.Client, method, url string, n int) bool {
	t.Helper()
	var (
		sent atomic.Int64
		hit  atomic.Bool
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for !hit.Load() && sent.Add(1) <= int64(n) {
				req, err := http.NewRequest(method, url, nil)
				if err != nil {
					return
				}
				resp, err := c.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					hit.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return hit.Load()
}

func status(t *testing.T, c *http.Client, method, url string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// proxiedServe is onceplan serve with the owner's account, and a reverse
// proxy process in front of it.
type proxiedServe struct {
	pool        *pgxpool.Pool
	direct, via string // serve's URL, the proxy's URL
	email       string
}

const ownerPassword = "correct horse battery staple"

func startProxiedServe(t *testing.T, args []string, envs map[string]string) proxiedServe {
	t.Helper()
	pool, direct := startServe(t, args, envs)
	return proxiedServe{pool: pool, direct: direct, via: startReverseProxy(t, direct), email: "owner@example.com"}
}

// startServe runs onceplan serve on a database of its own, listening on
// a loopback port, with a proposer owner@example.com and the admin
// root@example.com (both with ownerPassword). It returns the database
// and serve's URL; serve stops when the test ends.
func startServe(t *testing.T, args []string, envs map[string]string) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	urls := pgtest.Database(t)
	pool := pgtest.NewPool(t, urls.App)
	_, err := auth.CreateUser(ctx, pool, auth.NewUser{Email: "owner@example.com", Roles: []auth.Role{auth.RoleProposer}, Password: ownerPassword})
	require.NoError(t, err)
	var out lockedBuffer
	env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(k string) string {
		switch k {
		case "ONCEPLAN_ADMIN_EMAIL":
			return "root@example.com"
		case "ONCEPLAN_ADMIN_PASSWORD":
			return ownerPassword
		}
		return envs[k]
	}}
	args = append([]string{"--database-url", urls.App, "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0"}, args...)
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, env, args) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc, out.String())
	})
	re := regexp.MustCompile(`"msg":"onceplan is serving","url":"([^"]+)"`)
	deadline := time.Now().Add(time.Minute)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return pool, m[1]
		}
		select {
		case err := <-errc:
			t.Fatalf("onceplan serve stopped before serving: %v\n%s", err, out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "onceplan serve did not say it was serving within a minute: %s", out.String())
		time.Sleep(20 * time.Millisecond)
	}
}

// attemptAddresses lists the distinct addresses the throttle counted the
// accounts matching like under.
func attemptAddresses(t *testing.T, pool *pgxpool.Pool, like string) []string {
	t.Helper()
	var ips []string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(DISTINCT ip ORDER BY ip), '{}') FROM login_attempt WHERE email LIKE $1`, like).Scan(&ips))
	return ips
}

// stranger makes 25 failed sign-ins for random accounts through the proxy,
// each with a forged X-Forwarded-For, and returns their statuses.
func strangerSprays(t *testing.T, s proxiedServe, c *http.Client) []int {
	t.Helper()
	var got []int
	for i := range auth.MaxFailuresPerIP + 5 {
		st, session := signIn(t, c, s.via, fmt.Sprintf("random-%d@example.com", i), "a guess", fmt.Sprintf("198.51.100.%d", i+1))
		require.False(t, session)
		got = append(got, st)
	}
	return got
}

// TestServeBehindAReverseProxy: onceplan serve behind a real reverse proxy
// process on loopback. With --trusted-proxies naming the proxy, a
// stranger's 25 failed sign-ins for random accounts hold back the
// stranger's own address, read from X-Forwarded-For (a forged value the
// stranger sends further left is not believed), and the owner, another
// client of the same proxy, is not held at all; the unsubscribe and
// webhook rate limits count the same client address. A direct client
// cannot forge X-Forwarded-For either.
func TestServeBehindAReverseProxy(t *testing.T) {
	t.Parallel()
	s := startProxiedServe(t, nil, map[string]string{"ONCEPLAN_TRUSTED_PROXIES": "127.0.0.1/32, ::1"})
	stranger, owner := from("127.0.0.2"), from("127.0.0.3")

	got := strangerSprays(t, s, stranger)
	want := make([]int, 0, len(got))
	for i := range got {
		want = append(want, map[bool]int{true: http.StatusUnauthorized, false: http.StatusTooManyRequests}[i < auth.MaxFailuresPerIP])
	}
	require.Equal(t, want, got, "the stranger's address is held after its %d failures", auth.MaxFailuresPerIP)
	require.Equal(t, []string{"127.0.0.2"}, attemptAddresses(t, s.pool, "random-%"),
		"counted under the stranger's own address, not the proxy's nor the forged ones")

	// The owner, through the same proxy: not held, even for a typo.
	st, session := signIn(t, owner, s.via, s.email, "a typo", "")
	require.Equal(t, http.StatusUnauthorized, st, "the owner's address is not held")
	require.False(t, session)
	st, session = signIn(t, owner, s.via, s.email, ownerPassword, "")
	require.Equal(t, http.StatusSeeOther, st)
	require.True(t, session, "the owner signs in")
	require.Equal(t, []string{"127.0.0.3"}, attemptAddresses(t, s.pool, s.email))

	// A client that reaches serve directly is its own address, whatever it
	// forges.
	st, _ = signIn(t, from("127.0.0.4"), s.direct, "direct@example.com", "a guess", "127.0.0.1, 203.0.113.9")
	require.Equal(t, http.StatusUnauthorized, st)
	require.Equal(t, []string{"127.0.0.4"}, attemptAddresses(t, s.pool, "direct@%"))

	// The open routes' rate limits count the same client address.
	require.True(t, limited(t, stranger, http.MethodPost, s.via+"/webhooks/nope", 1000), "the stranger's webhook posts are limited")
	require.Equal(t, http.StatusNotFound, status(t, owner, http.MethodPost, s.via+"/webhooks/nope"), "the owner's are not")
	require.True(t, limited(t, stranger, http.MethodGet, s.via+"/u/x", 1000), "the stranger's unsubscribe requests are limited")
	require.Equal(t, http.StatusBadRequest, status(t, owner, http.MethodGet, s.via+"/u/x"), "the owner's are not")
}

// TestServeBehindAReverseProxyUntrusted: the same proxy, no
// --trusted-proxies: every client is the proxy's address and a forged
// X-Forwarded-For is ignored, so the stranger's failures hold the proxy's
// address — and the owner's right password still signs in, since the
// address's hold never blocks an account without failures of its own
// from there.
func TestServeBehindAReverseProxyUntrusted(t *testing.T) {
	t.Parallel()
	s := startProxiedServe(t, nil, nil)
	stranger, owner := from("127.0.0.2"), from("127.0.0.3")

	got := strangerSprays(t, s, stranger)
	require.Equal(t, http.StatusUnauthorized, got[0])
	require.Equal(t, http.StatusTooManyRequests, got[len(got)-1], "the proxy's address is held")
	require.Equal(t, []string{"127.0.0.1"}, attemptAddresses(t, s.pool, "random-%"),
		"counted under the direct peer, the proxy: neither the forged X-Forwarded-For nor the one the proxy added is believed")

	st, session := signIn(t, owner, s.via, s.email, ownerPassword, "")
	require.Equal(t, http.StatusSeeOther, st, "the owner behind the held address signs in")
	require.True(t, session)
	// The hold is real for what it should hold: a wrong password for an
	// untouched account is refused as held.
	st, _ = signIn(t, owner, s.via, "someone@example.com", "a guess", "")
	require.Equal(t, http.StatusTooManyRequests, st)

	// Direct, with a forged header: still the peer's own address.
	st, _ = signIn(t, from("127.0.0.4"), s.direct, "direct@example.com", "a guess", "203.0.113.9")
	require.Equal(t, http.StatusUnauthorized, st)
	require.Equal(t, []string{"127.0.0.4"}, attemptAddresses(t, s.pool, "direct@%"))
}

// TestServeTrustedProxiesRefused: a range that does not parse is refused
// in one sentence naming where it came from.
func TestServeTrustedProxiesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  string
		says string
	}{
		{[]string{"--trusted-proxies", "10.0.0.0/8,proxy.example"}, "", `--trusted-proxies: "proxy.example" is not a CIDR range`},
		{nil, "10.0.0.1/8", `ONCEPLAN_TRUSTED_PROXIES: "10.0.0.1/8" has host bits set: write 10.0.0.0/8`},
		{[]string{"--trusted-proxies", "10.0.0.0/33"}, "10.0.0.0/8", `--trusted-proxies: "10.0.0.0/33" is not a CIDR range`},
	} {
		var stdout, stderr strings.Builder
		env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			if k == "ONCEPLAN_TRUSTED_PROXIES" {
				return tc.env
			}
			return ""
		}}
		err := runServe(context.Background(), env, append([]string{"--database-url", pgtest.URL(t), "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...))
		requireOneLine(t, err)
		require.Contains(t, err.Error(), tc.says)
	}
}
