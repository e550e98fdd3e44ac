package inbound_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
)

// TestLiveSNSSignature checks a real Amazon SNS notification against
// Amazon's own signing certificate, with the production checks (the
// certificate only over https from sns.<region>.amazonaws.com). It runs
// only when ONCEPLAN_LIVE_SNS_MESSAGE names a file holding one, as an SNS
// HTTPS subscription posted it (capture one with any request bin), and
// the network reaches AWS; otherwise it is skipped, saying so. The tests
// without it sign with keys they make themselves.
func TestLiveSNSSignature(t *testing.T) {
	path := os.Getenv("ONCEPLAN_LIVE_SNS_MESSAGE")
	if path == "" {
		t.Skip("set ONCEPLAN_LIVE_SNS_MESSAGE to a file with a real SNS notification to check it against Amazon's certificate")
	}
	body, err := os.ReadFile(path)
	require.NoError(t, err)
	m, err := inbound.ParseSNS(body)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := &inbound.SNSVerifier{TopicARNs: []string{m.TopicArn}}
	require.NoError(t, v.Verify(ctx, m), "a real SNS message verifies with the production checks")

	// One byte of the message changed: refused.
	m.Message += " "
	require.Error(t, v.Verify(ctx, m))
}
