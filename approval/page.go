package approval

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// CampaignCursor is a position in the newest-first campaign listing.
type CampaignCursor struct {
	CreatedAt time.Time
	ID        string
}

// String encodes the cursor for a client (opaque to it).
func (c CampaignCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + c.ID))
}

// ParseCampaignCursor decodes a cursor String gave out.
func ParseCampaignCursor(s string) (CampaignCursor, error) {
	bad := onceplan.FieldErrorf("after", "is not a cursor this API gave out (use the previous page's \"next\")")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return CampaignCursor{}, bad
	}
	at, id, ok := strings.Cut(string(b), "|")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || !validUUID(id) {
		return CampaignCursor{}, bad
	}
	return CampaignCursor{CreatedAt: t, ID: id}, nil
}

// PageCampaigns lists campaigns newest first, limit at a time, after the
// cursor (nil: from the start). next is nil on the last page.
func PageCampaigns(ctx context.Context, db onceplan.DB, after *CampaignCursor, limit int) ([]Campaign, *CampaignCursor, error) {
	var rows pgx.Rows
	var err error
	if after == nil {
		rows, err = db.Query(ctx, `SELECT `+campaignCols+` FROM campaign ORDER BY created_at DESC, id DESC LIMIT $1`, limit+1)
	} else {
		rows, err = db.Query(ctx, `SELECT `+campaignCols+` FROM campaign WHERE (created_at, id) < ($1, $2)
			ORDER BY created_at DESC, id DESC LIMIT $3`, after.CreatedAt, after.ID, limit+1)
	}
	if err != nil {
		return nil, nil, err
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Campaign, error) { return scanCampaign(r) })
	if err != nil || len(list) <= limit {
		return list, nil, err
	}
	list = list[:limit]
	last := list[limit-1]
	return list, &CampaignCursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}
