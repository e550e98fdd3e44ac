package inbound_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
)

// TestSESNeedsTopics: ses= without a topic list is refused at start, in
// one sentence that says why and what to write; with topics it is taken,
// and only those topics are shown.
func TestSESNeedsTopics(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"ses=", "ses= ", "ses=;", "SES= ; "} {
		_, err := inbound.ParseEndpoints([]string{spec}, "")
		require.Error(t, err, spec)
		require.NotContains(t, err.Error(), "\n")
		require.Contains(t, err.Error(), "ses=arn:aws:sns:", spec)
		require.Contains(t, err.Error(), "any AWS account", spec)
		_, err = inbound.ParseEndpoints(nil, "generic=0123456789abcdef,"+spec)
		require.ErrorContains(t, err, "ONCEPLAN_WEBHOOKS", spec)
	}
	const a, b = "arn:aws:sns:eu-west-1:123456789012:bounces", "arn:aws-cn:sns:cn-north-1:123456789012:bounces"
	eps, err := inbound.ParseEndpoints([]string{"ses=" + a + ";" + b}, "")
	require.NoError(t, err)
	require.Equal(t, "ses="+a+";"+b, eps[inbound.SES].String())
	require.Equal(t, []string{a, b}, eps[inbound.SES].SNS().TopicARNs)
	_, err = inbound.ParseEndpoint("ses=" + strings.ToUpper("topic"))
	require.ErrorContains(t, err, "is not a topic ARN")
}
