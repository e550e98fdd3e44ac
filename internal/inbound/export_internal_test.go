package inbound

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/onceplan/onceplan/internal/onceplan"
)

// This file gives the package's tests what only they need.

// Sign returns the X-Onceplan-Signature value of a generic body signed at
// timestamp (Unix seconds, sent as X-Onceplan-Timestamp) with secret:
// "v1=" and the hex HMAC-SHA256 of the timestamp, a dot and the body, as
// a sender computes it. A signature older than GenericMaxAge is refused.
func Sign(secret string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(genericSigned(strconv.FormatInt(timestamp, 10), body))
	return genericVersion + hex.EncodeToString(m.Sum(nil))
}

// Raw returns a stored event's raw bytes.
func Raw(ctx context.Context, db onceplan.DB, id int64) ([]byte, error) {
	var b []byte
	err := db.QueryRow(ctx, `SELECT raw FROM inbound_event WHERE id = $1`, id).Scan(&b)
	return b, err
}
