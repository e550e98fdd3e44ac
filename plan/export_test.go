package plan

import (
	"context"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// Preview is PreviewWithLink with SampleUnsubscribeURL as the unsubscribe
// link: the tests' preview of a draft's message.
func Preview(ctx context.Context, db onceplan.DB, d Content, address string, ordinal int) (Message, error) {
	return PreviewWithLink(ctx, db, d, address, ordinal, SampleUnsubscribeURL)
}
