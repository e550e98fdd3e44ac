package cli

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) {
	// The test binary run again as the reverse proxy of
	// TestServeBehindAReverseProxy (serve_proxy_test.go).
	if target := os.Getenv(reverseProxyEnv); target != "" {
		os.Exit(runReverseProxy(target))
	}
	pgtest.Main(m)
}

type cliBundle struct {
	ctx  context.Context
	url  string
	pool *pgxpool.Pool
}

func setupCLI(t *testing.T) *cliBundle {
	t.Helper()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &cliBundle{ctx: context.Background(), url: url, pool: pool}
}

type result struct {
	stdout, stderr string
	err            error
}

// run runs a command group's run function in-process on the bundle's
// database: args[0] is the subcommand, --database-url is added after it
// (alone when there are no args).
func (b *cliBundle) run(t *testing.T, group func(context.Context, Env, []string) error, stdin string, args ...string) result {
	t.Helper()
	if len(args) == 0 {
		return b.runArgs(group, stdin, []string{"--database-url", b.url})
	}
	return b.runArgs(group, stdin, append([]string{args[0], "--database-url", b.url}, args[1:]...))
}

// runArgs runs group with exactly the args full.
func (b *cliBundle) runArgs(group func(context.Context, Env, []string) error, stdin string, full []string) result {
	var stdout, stderr bytes.Buffer
	env := Env{
		Stdin:  strings.NewReader(stdin),
		Stdout: &stdout,
		Stderr: &stderr,
		Getenv: func(string) string { return "" },
	}
	err := group(b.ctx, env, full)
	return result{stdout.String(), stderr.String(), err}
}

func requireOneLine(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "\n")
}

func TestUserAddPasswordStdin(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	r := b.run(t, runUser, "correct horse battery staple\nsecond line ignored\n",
		"add", "--email", "Ann@Example.com", "--role", "proposer", "--role", "approver,viewer", "--name", "Ann", "--password-stdin")
	require.NoError(t, r.err)
	require.Equal(t, "created user ann@example.com (roles: proposer, approver, viewer)\n", r.stdout)
	require.NotContains(t, r.stdout+r.stderr, "correct horse")

	// The password is the first line without its newline.
	_, u, err := auth.Login(b.ctx, b.pool, "ann@example.com", "correct horse battery staple", auth.LoginMeta{})
	require.NoError(t, err)
	require.Equal(t, "Ann", u.Name)

	r = b.run(t, runUser, "correct horse battery staple\r\n", "add", "--email", "ann@example.com", "--role", "viewer", "--password-stdin")
	requireOneLine(t, r.err)
	require.Equal(t, "user add: a user with the email ann@example.com already exists", r.err.Error())

	r = b.run(t, runUser, "", "list")
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^EMAIL +NAME +ROLES +CREATED +DISABLED\nann@example.com +Ann +proposer,approver,viewer +\d{4}-\d\d-\d\d \d\d:\d\d UTC +-$`, r.stdout)
}

func TestUserAddGeneratesPassword(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	r := b.run(t, runUser, "", "add", "--email", "bob@example.com", "--role", "operator")
	require.NoError(t, r.err)
	m := regexp.MustCompile(`^created user bob@example.com \(roles: operator\)\npassword: (\S{20})\n$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	_, _, err := auth.Login(b.ctx, b.pool, "bob@example.com", m[1], auth.LoginMeta{})
	require.NoError(t, err)
}

func TestUserAddRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	for _, tc := range []struct {
		stdin string
		args  []string
		msg   string
	}{
		{"correct horse battery staple\n", []string{"add", "--email", "a@example.com", "--role", "boss", "--password-stdin"},
			`"boss" is not a role (one of admin, proposer, approver, operator, viewer)`},
		{"short\n", []string{"add", "--email", "a@example.com", "--role", "viewer", "--password-stdin"},
			"user add: password: must be at least 12 characters (it has 5)"},
		{"", []string{"add", "--email", "a@example.com", "--role", "viewer", "--password-stdin"},
			"user add: --password-stdin: standard input is empty: give the password on its first line"},
		{"", []string{"add", "--role", "viewer"}, "user add: --email is required"},
		{"", []string{"add", "--email", "a@example.com"}, "user add: give at least one --role (admin, proposer, approver, operator, viewer)"},
		{"", []string{"add", "--email", "nope", "--role", "viewer"}, `user add: email: address "nope" has no "@"`},
		{"", []string{"set-roles", "--email", "a@example.com", "--role", "viewer"}, "user set-roles: there is no user a@example.com"},
		{"", []string{"remove"}, `user: unknown subcommand "remove": use one of add, list, set-roles, set-password, disable, enable`},
	} {
		r := b.run(t, runUser, tc.stdin, tc.args...)
		requireOneLine(t, r.err)
		require.Contains(t, r.err.Error(), tc.msg)
		require.Empty(t, r.stdout)
	}
	users, err := auth.ListUsers(b.ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, users)
}

func TestUserSetRoles(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	require.NoError(t, b.run(t, runUser, "", "add", "--email", "cy@example.com", "--role", "viewer").err)
	r := b.run(t, runUser, "", "set-roles", "--email", "cy@example.com", "--role", "approver", "--role", "operator")
	require.NoError(t, r.err)
	require.Equal(t, "user cy@example.com now has roles: approver, operator\n", r.stdout)
	u, err := auth.GetUserByEmail(b.ctx, b.pool, "cy@example.com")
	require.NoError(t, err)
	require.Equal(t, []auth.Role{auth.RoleApprover, auth.RoleOperator}, u.Roles)
}

func TestTokenCreate(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	require.NoError(t, b.run(t, runUser, "", "add", "--email", "dee@example.com", "--role", "proposer", "--role", "approver").err)

	r := b.run(t, runToken, "", "create", "--user", "dee@example.com", "--name", "ci")
	require.NoError(t, r.err)
	require.Regexp(t, `^op_[A-Za-z0-9_-]{43}\n$`, r.stdout, "the token alone on stdout")
	secret := strings.TrimSuffix(r.stdout, "\n")
	require.Contains(t, r.stderr, `created personal token 1 "ci" for dee@example.com (prefix `+secret[:8]+`)`)
	actor, _, err := auth.TokenActor(b.ctx, b.pool, secret)
	require.NoError(t, err)
	require.False(t, actor.Agent)
	require.Equal(t, "dee@example.com", actor.Email)

	r = b.run(t, runToken, "", "create", "--user", "dee@example.com", "--name", "claude", "--agent")
	require.NoError(t, r.err)
	require.Regexp(t, `^opa_[A-Za-z0-9_-]{43}\n$`, r.stdout)
	agentSecret := strings.TrimSuffix(r.stdout, "\n")
	actor, _, err = auth.TokenActor(b.ctx, b.pool, agentSecret)
	require.NoError(t, err)
	require.True(t, actor.Agent)
	require.ErrorIs(t, auth.Authorize(actor, auth.ActionApprove), onceplan.ErrForbidden)

	r = b.run(t, runToken, "", "list", "--user", "dee@example.com")
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, secret[:8])
	require.NotContains(t, r.stdout, secret)

	r = b.run(t, runToken, "", "revoke", "--prefix", agentSecret[:8])
	require.NoError(t, r.err)
	require.Equal(t, `revoked agent token 2 "claude" of dee@example.com (prefix `+agentSecret[:8]+")\n", r.stdout)
	_, _, err = auth.TokenActor(b.ctx, b.pool, agentSecret)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)

	r = b.run(t, runToken, "", "revoke", "--id", "1")
	require.NoError(t, r.err)
	_, _, err = auth.TokenActor(b.ctx, b.pool, secret)
	require.ErrorIs(t, err, onceplan.ErrUnauthenticated)
}

func TestTokenRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"create", "--user", "nobody@example.com", "--name", "ci"}, "token create: there is no user nobody@example.com"},
		{[]string{"create", "--user", "nobody@example.com"}, "token create: --name is required (say what will use the token)"},
		{[]string{"create", "--name", "ci"}, "token create: --user is required"},
		{[]string{"revoke"}, "token revoke: give either --prefix or --id"},
		{[]string{"revoke", "--id", "3", "--prefix", "op_abcde"}, "token revoke: give either --prefix or --id"},
		{[]string{"revoke", "--prefix", "op_abcde"}, "token revoke: there is no API token with the prefix op_abcde"},
		{[]string{"revoke", "--id", "x"}, `token revoke: invalid value "x" for flag -id`},
		{[]string{"mint"}, `token: unknown subcommand "mint": use one of create, list, revoke`},
	} {
		r := b.run(t, runToken, "", tc.args...)
		requireOneLine(t, r.err)
		require.Contains(t, r.err.Error(), tc.msg)
		require.Empty(t, r.stdout)
	}
}

func TestUserAndTokenHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group func(context.Context, Env, []string) error
		args  []string
		want  string
	}{
		{runUser, []string{"--help"}, "Usage: onceplan user SUBCOMMAND [flags]"},
		{runUser, []string{"add", "--help"}, "Usage: onceplan user add [flags]"},
		{runToken, []string{"help"}, "Usage: onceplan token SUBCOMMAND [flags]"},
		{runToken, []string{"create", "-h"}, "-agent"},
	} {
		var stdout bytes.Buffer
		err := tc.group(context.Background(), Env{Stdout: &stdout, Stderr: &stdout, Getenv: func(string) string { return "" }}, tc.args)
		code, ok := ExitCode(err)
		require.True(t, ok)
		require.Zero(t, code)
		require.Contains(t, stdout.String(), tc.want)
	}
	var stderr bytes.Buffer
	err := runUser(context.Background(), Env{Stdout: &stderr, Stderr: &stderr, Getenv: func(string) string { return "" }}, nil)
	code, _ := ExitCode(err)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "set-roles")
}

// TestCommandLineAdministrationIsAudited: what an administrator does with
// `onceplan user …` and `onceplan token …` lands in the same write-once
// trail as the web's actions, naming the account and host that ran it,
// in the transaction of the action: a refused action leaves no entry.
func TestCommandLineAdministrationIsAudited(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	ok := func(group func(context.Context, Env, []string) error, stdin string, args ...string) result {
		t.Helper()
		r := b.run(t, group, stdin, args...)
		require.NoError(t, r.err, "%v: %s", args, r.stderr)
		return r
	}
	ok(runUser, "", "add", "--email", "dee@example.com", "--role", "viewer")
	ok(runUser, "", "set-roles", "--email", "dee@example.com", "--role", "approver")
	ok(runUser, "correct horse battery staple\n", "set-password", "--email", "Dee@Example.com", "--password-stdin")
	ok(runUser, "", "disable", "--email", "dee@example.com")
	ok(runUser, "", "enable", "--email", "dee@example.com")
	ok(runToken, "", "create", "--user", "dee@example.com", "--name", "ci")
	var tokID int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM api_token WHERE name = 'ci'`).Scan(&tokID))
	ok(runToken, "", "revoke", "--id", strconv.FormatInt(tokID, 10))
	// Refused: no entry.
	require.Error(t, b.run(t, runUser, "", "set-roles", "--email", "nobody@example.com", "--role", "viewer").err)
	require.Error(t, b.run(t, runUser, "", "add", "--email", "dee@example.com", "--role", "viewer").err)

	events, err := auth.RecentEvents(b.ctx, b.pool, 20)
	require.NoError(t, err)
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
		require.Equal(t, "dee@example.com", e.Subject, e.Action)
		require.Zero(t, e.ActorID, e.Action)
		require.Equal(t, cliActor(), e.ActorCLI, e.Action)
		require.Regexp(t, `^command line \(.+@.+\)$`, e.Who(), e.Action)
	}
	require.Equal(t, []string{"token_revoke", "token_create", "user_enable", "user_disable", "user_password", "user_roles", "user_add"}, actions)
	require.JSONEq(t, `{"from": ["viewer"], "to": ["approver"]}`, events[5].Detail)
	require.JSONEq(t, `{"token": "`+prefixOf(t, b, tokID)+`", "name": "ci", "agent": false}`, events[1].Detail)

	// Exactly one of a signed-in user and the command line acted; the
	// database refuses anything else.
	for _, sql := range []string{
		`INSERT INTO admin_event (action, subject) VALUES ('user_add', 'x@example.com')`,
		`INSERT INTO admin_event (actor_cli, action, subject) VALUES ('  ', 'user_add', 'x@example.com')`,
		`INSERT INTO admin_event (actor_id, actor_cli, action, subject) SELECT id, 'root@h', 'user_add', 'x@example.com' FROM app_user LIMIT 1`,
		`INSERT INTO admin_event (actor_cli, action, subject) VALUES ('root@h', 'user_delete', 'x@example.com')`,
	} {
		_, err := b.pool.Exec(b.ctx, sql)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, sql)
		require.Equal(t, "23514", pgErr.Code, sql)
	}
}

func prefixOf(t *testing.T, b *cliBundle, tokID int64) string {
	t.Helper()
	var p string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT prefix FROM api_token WHERE id = $1`, tokID).Scan(&p))
	return p
}
