package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

type createRequest struct {
	Name              string          `json:"name"`
	Provider          string          `json:"provider"`
	From              string          `json:"from"`
	Subject           string          `json:"subject"`
	Text              string          `json:"text"`
	HTML              string          `json:"html"`
	RequiredApprovals int             `json:"required_approvals"`
	ScheduledAt       *time.Time      `json:"scheduled_at"`
	StartOnApproval   bool            `json:"start_on_approval"`
	Targets           json.RawMessage `json:"targets"`
	// ListUnsubscribe: each message carries a one-click unsubscribe link
	// (default true); false makes the campaign transactional.
	ListUnsubscribe *bool `json:"list_unsubscribe"`
}

func (a *API) createCampaign(c echo.Context, actor auth.Actor) error {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, a.cfg.MaxJSONBytes))
	if err != nil {
		return a.fail(c, jsonError(err))
	}
	c.Request().Body = io.NopCloser(bytes.NewReader(raw))
	var req createRequest
	if err := a.decode(c, &req); err != nil {
		return a.fail(c, err)
	}
	p := approval.CreateParams{
		Name: req.Name, Provider: req.Provider, ScheduledAt: req.ScheduledAt, StartOnApproval: req.StartOnApproval,
		RequiredApprovals: req.RequiredApprovals,
		Payload:           plan.Payload{From: req.From, Subject: req.Subject, Text: req.Text, HTML: req.HTML},
		Transactional:     req.ListUnsubscribe != nil && !*req.ListUnsubscribe,
	}
	if t := bytes.TrimSpace(req.Targets); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		p.Targets = &approval.TargetsParams{Format: plan.FormatJSON, Body: bytes.NewReader(t)}
	}
	if key := c.Request().Header.Get("Idempotency-Key"); key != "" {
		if len(key) > 255 {
			return writeError(c, http.StatusBadRequest, "invalid", "the Idempotency-Key header is longer than 255 characters")
		}
		sum := sha256.Sum256(raw)
		p.IdempotencyKey, p.RequestHash = key, hex.EncodeToString(sum[:])
	}
	res, err := a.cfg.Approval.Create(c.Request().Context(), actor, p)
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if err == nil {
		c.Response().Header().Set("Location", Prefix+"/campaigns/"+res.Campaign.ID)
	}
	return a.answer(c, status, res, err)
}
