package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	neturl "net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/app"
	"github.com/onceplan/onceplan/internal/inbound"
	"github.com/onceplan/onceplan/internal/metrics"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/internal/toolcall"
	"github.com/onceplan/onceplan/web"
	"github.com/onceplan/onceplan/web/api"
	"github.com/onceplan/onceplan/web/webhook"
)

func runServe(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	listen := fs.String("listen", "127.0.0.1:8080", "address for the web UI and the JSON API")
	secure := fs.Bool("secure-cookies", false, "mark cookies Secure even when requests do not look like HTTPS (behind a TLS proxy that does not send X-Forwarded-Proto, or is not in --trusted-proxies)")
	demo := fs.Bool("demo", false, fmt.Sprintf("on a database without campaigns, create a demo campaign (%d targets on the first provider) waiting for approval", app.DemoTargets))
	testRecipients := fs.String("test-recipients", "", fmt.Sprintf("comma-separated addresses that may receive test sends besides the users' own (at most %d per test send, %v a minute per user)",
		approval.TestSendMaxRecipients, float64(approval.TestSendRate)*60))
	trustedProxies := fs.String("trusted-proxies", "", "CIDR,…: the reverse proxies in front of serve, whose X-Forwarded-For names the client (read from the right, skipping these hops) for the sign-in throttle and the rate limits, and whose X-Forwarded-Proto: https makes cookies Secure and turns HSTS on (default $ONCEPLAN_TRUSTED_PROXIES; none: the direct peer is the client, X-Forwarded-For and X-Forwarded-Proto ignored)")
	var webhookFlags listFlag
	fs.Var(&webhookFlags, "webhook", "KIND=SECRET: take bounces and complaints at POST /webhooks/KIND, repeatable (default $ONCEPLAN_WEBHOOKS, comma-separated): ses=TOPIC-ARN[;…], postmark=USER:PASSWORD, sendgrid=BASE64-PUBLIC-KEY, mailgun=SIGNING-KEY, generic=SECRET")
	var wf workerFlags
	wf.register(fs)
	wf.registerPublicURL(fs, "http://<the --listen address>")
	if err := parse(fs, env, args); err != nil {
		return err
	}
	allowList, err := approval.ParseTestAllowList(strings.Split(*testRecipients, ","))
	if err != nil {
		return fmt.Errorf("--test-recipients: %w", err)
	}
	if err := wf.check(); err != nil {
		return err
	}
	webhooks, err := inbound.ParseEndpoints(webhookFlags, env.Getenv("ONCEPLAN_WEBHOOKS"))
	if err != nil {
		return err
	}
	// The flag wins over the environment, as --webhook and --notify do.
	proxiesFrom, proxiesText := "--trusted-proxies", *trustedProxies
	if !flagSet(fs, "trusted-proxies") {
		proxiesFrom, proxiesText = "ONCEPLAN_TRUSTED_PROXIES", env.Getenv("ONCEPLAN_TRUSTED_PROXIES")
	}
	proxies, err := web.ParseTrustedProxies(proxiesText)
	if err != nil {
		return fmt.Errorf("%s: %w", proxiesFrom, err)
	}
	logger := newLogger(env.Stderr)

	// Bound first, before the workers render a message: the default
	// public URL is the address actually bound (--listen may say port 0).
	ln, err := web.Listen(*listen)
	if err != nil {
		return err
	}
	served := false
	defer func() {
		if !served {
			ln.Close()
		}
	}()
	if wf.opts.PublicURL == "" {
		wf.opts.PublicURL = suppression.PublicURLFromListen(ln.Addr().String())
	}

	d, err := app.OpenDB(ctx, app.DBOptions{
		URL:      db.databaseURL,
		DataDir:  db.dataDir,
		Migrate:  db.databaseURL == "",
		MaxConns: workerPoolConns,
		Logger:   logger,
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Close(stopCtx); err != nil {
			logger.Error("closing the database", "err", err)
		}
	}()

	// Someone must be able to sign in: the first start creates an admin.
	boot, err := app.EnsureAdmin(ctx, d.Pool, cliActor(), env.Getenv("ONCEPLAN_ADMIN_EMAIL"), env.Getenv("ONCEPLAN_ADMIN_PASSWORD"))
	if err != nil {
		return err
	}

	ws, err := wf.start(ctx, env, d, db.dataDir, logger)
	if err != nil {
		return err
	}
	// Shutdown in order: HTTP first (no new work), then the workers (jobs
	// in flight finish), then the database (deferred above).
	defer stopWorkers(ws, logger)

	counts := approval.NewCountsCache() // shared by the UI and the API
	// One sender for the UI and the API: one rate limit per user.
	sender, err := approval.NewTestSender(approval.TestSendConfig{DB: d.Pool, Providers: ws.Providers, AllowList: allowList})
	if err != nil {
		return err
	}
	tools := toolcall.NewService(d.Pool, toolcall.Options{Logger: logger}) // the UI's and the API's
	srv := web.NewServer(web.Config{
		Pool: d.Pool, Logger: logger, Approval: ws.Approval, Providers: ws.Providers, ToolCalls: tools,
		River: ws.Runner.Client(), SecureCookies: *secure, Counts: counts, PublicURL: wf.opts.PublicURL, TestSend: sender,
		Notifiers: ws.Notifiers, NotifyWindow: wf.opts.NotifyWindow, TrustedProxies: proxies,
		Mount: func(e *echo.Echo) {
			// Stopping: a signal ends the decision long polls before the
			// HTTP shutdown waits for the requests in flight.
			// Every link an answer carries is under --public-url, never
			// the request's Host.
			api.Register(e, api.Config{Pool: d.Pool, Approval: ws.Approval, Logger: logger, Counts: counts, TestSend: sender, Stopping: ctx.Done(), ToolCalls: tools,
				BaseURL: wf.opts.PublicURL})
			// Bounces and complaints: no session, no CSRF; each kind authenticates
			// its provider (package inbound). Only the kinds named, never secrets.
			webhook.Register(e, webhook.Config{Pool: d.Pool, Endpoints: webhooks, Logger: logger})
			if len(webhooks) > 0 {
				logger.Info("webhooks configured", "kinds", webhooks.Names())
			}
			// Prometheus metrics, unauthenticated like /healthz: serve listens
			// on loopback by default; expose it only to your scraper.
			reg := metrics.Registry(d.Pool, logger)
			metrics.Init(ws.Providers.Names())
			e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)})))
		},
	})
	srv.UseListener(ln)
	served = true // the server closes it now
	url := "http://" + srv.Addr()
	if len(proxies) > 0 {
		logger.Info("trusted proxies: the client address is read from their X-Forwarded-For", "ranges", proxiesText)
	}
	logger.Info("onceplan is serving", "url", url, "public_url", wf.opts.PublicURL)

	if boot.Created {
		fmt.Fprintf(env.Stderr, "\nFirst start: created the admin account.\n  sign in at: %s/login\n  email:      %s\n", url, boot.Email)
		if boot.Password != "" {
			fmt.Fprintf(env.Stderr, "  password:   %s\n  (shown only now: keep it, or set another with `onceplan user set-password --email %s --password-stdin`)\n", boot.Password, boot.Email)
		} else {
			fmt.Fprintln(env.Stderr, "  password:   the one in ONCEPLAN_ADMIN_PASSWORD")
		}
	}
	if *demo {
		names := ws.Providers.Names()
		id, err := app.EnsureDemo(ctx, d.Pool, ws.Approval, app.DemoOptions{Provider: names[0], Targets: app.DemoTargets, Who: cliActor()})
		if err != nil {
			srv.Shutdown(context.Background())
			return err
		}
		if id != "" {
			fmt.Fprintf(env.Stderr, "\nDemo: a campaign of %d messages waits for your approval.\n"+
				"  1. sign in as %s and open %s/campaigns/%s/approval\n"+
				"  2. press Approve, then Start, and watch the counts\n"+
				"  3. the messages land in %s\n\n", app.DemoTargets, boot.Email, url, id, demoWhere(ws, names[0]))
		}
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return err
	}
	return <-errc
}

// demoWhere says where a provider's messages can be seen.
func demoWhere(ws *app.Workers, name string) string {
	p, _ := ws.Providers.Get(name)
	_, raw, _ := strings.Cut(p.String(), "=")
	if u, err := neturl.Parse(raw); err == nil && p.Kind() == "maildir" {
		return filepath.Join(u.Path, "new") + "/ (one file per message)"
	}
	return "the provider " + p.String()
}

// flagSet reports whether the command line gave the flag name (an empty
// value included), as opposed to its default.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
