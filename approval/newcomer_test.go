package approval_test

// What a newcomer trips over, as the workflow sees it — a
// campaign on a provider nobody serves, and targets whose merge variables
// are empty.

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// A provider the deployment does not send through would leave the campaign
// "running, not started" forever: every door refuses it, at create and at
// submit, naming the configured ones.
func TestUnknownProviderIsRefusedAtCreateAndSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.svc.Providers = []string{"outbox", "smtp"}
	_, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{Name: "Nope", Provider: "nope", Payload: payload})
	var fe *onceplan.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "provider", fe.Field)
	require.Equal(t, `"nope" is not a provider this server sends through; the configured providers are outbox, smtp`, fe.Reason)
	require.ErrorIs(t, err, onceplan.ErrInvalid)
	require.Zero(t, b.count(t, `SELECT count(*) FROM campaign`), "nothing created")
	_, err = b.svc.Create(b.ctx, b.proposer, approval.CreateParams{Name: "None", Payload: payload})
	require.EqualError(t, err, "provider: is required; the configured providers are outbox, smtp")

	// A campaign made while its provider was configured, submitted after it
	// no longer is (the server restarted with other providers).
	b.svc.Providers = nil
	created := b.create(t, 1, 2)
	b.svc.Providers = []string{"smtp"}
	_, err = b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "provider", fe.Field)
	require.Contains(t, fe.Reason, `"outbox" is not a provider this server sends through; the configured providers are smtp`)
	got, err := b.svc.Get(b.ctx, created.Campaign.ID)
	require.NoError(t, err)
	require.Equal(t, approval.StateDraft, got.Campaign.State)

	b.svc.Providers = []string{"outbox"}
	_, err = b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.NoError(t, err)
}

// Empty merge variables are reported by the import and by the submit, which
// goes ahead: the proposer decides. The trail says the submit saw them.
func TestEmptyMergeVariablesWarnAtImportAndSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	csv := "email,first_name,invoice\nann@example.com,Ann,INV-1\nfrank@example.com,,INV-2\n"
	created, err := b.svc.Create(b.ctx, b.proposer, approval.CreateParams{
		Name: "Invoices", Provider: "outbox", Payload: payload,
		Targets: &approval.TargetsParams{Format: plan.FormatCSV, Body: strings.NewReader(csv)},
	})
	require.NoError(t, err)
	want := []plan.EmptyVar{{Line: 3, Target: "frank@example.com", Empty: []string{"first_name"}}}
	require.Equal(t, want, created.Import.Empty)
	require.Equal(t, 1, created.Import.EmptyCount)

	sub, err := b.svc.Submit(b.ctx, b.proposer, created.Campaign.ID)
	require.NoError(t, err, "a warning, not a refusal")
	require.Equal(t, approval.StatePendingApproval, sub.Campaign.State)
	require.NotNil(t, sub.Check)
	require.Equal(t, want, sub.Check.Empty)
	require.Equal(t, 1, sub.Check.EmptyCount)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM campaign_event WHERE campaign_id = $1 AND action = 'submit' AND (detail->>'empty')::int = 1`, created.Campaign.ID))
}
