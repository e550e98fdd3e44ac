package web

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
	"github.com/onceplan/onceplan/web/view"
)

// Forms: one struct per form, read from the request and validated before
// anything is written. Validation errors name the field, as the domain's
// *onceplan.FieldError does.

// payloadForm is a draft's message.
type payloadForm struct {
	From, Subject, Text, HTML string
}

func readPayloadForm(c echo.Context) payloadForm {
	// Browsers send CRLF line ends in textareas; the message keeps LF.
	nl := strings.NewReplacer("\r\n", "\n")
	return payloadForm{
		From:    strings.TrimSpace(c.FormValue("from")),
		Subject: strings.TrimSpace(c.FormValue("subject")),
		Text:    nl.Replace(c.FormValue("text")),
		HTML:    nl.Replace(c.FormValue("html")),
	}
}

func (f payloadForm) payload() plan.Payload {
	return plan.Payload{From: f.From, Subject: f.Subject, Text: f.Text, HTML: f.HTML}
}

func (f payloadForm) view() view.Payload {
	return view.Payload{From: f.From, Subject: f.Subject, Text: f.Text, HTML: f.HTML}
}

// Validate checks the templates compile and the fields are present.
func (f payloadForm) Validate() error { return f.payload().Validate() }

// newCampaignForm creates a campaign.
type newCampaignForm struct {
	Name              string
	Provider          string
	RequiredApprovals int
	Payload           payloadForm
	// Transactional: no unsubscribe link in the messages (the box
	// "transactional" ticked).
	Transactional bool
	// Start says when the campaign starts once approved: startManual (an
	// operator presses Start), startOnApproval, or startAt ScheduledAt
	// (the form's text, a UTC date and time; scheduledAt once read).
	Start       string
	ScheduledAt string
	scheduledAt *time.Time
	// CopyListOf names the campaign whose list the new one imports when
	// no file is uploaded (a clone: /campaigns/new?from=ID).
	CopyListOf string
}

// The new-campaign form's choices of when to start.
const (
	startManual     = "manual"
	startOnApproval = "approval"
	startAt         = "at"
)

// scheduleLayouts are the texts a datetime-local field sends (with or
// without seconds), read as UTC, as every time the pages show is.
var scheduleLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05"}

func readNewCampaignForm(c echo.Context) newCampaignForm {
	n, err := strconv.Atoi(strings.TrimSpace(c.FormValue("required_approvals")))
	if err != nil {
		n = -1
	}
	return newCampaignForm{
		Name:              strings.TrimSpace(c.FormValue("name")),
		Provider:          strings.TrimSpace(c.FormValue("provider")),
		RequiredApprovals: n,
		Payload:           readPayloadForm(c),
		Transactional:     c.FormValue("transactional") != "",
		Start:             strings.TrimSpace(c.FormValue("start")),
		ScheduledAt:       strings.TrimSpace(c.FormValue("scheduled_at")),
		CopyListOf:        strings.TrimSpace(c.FormValue("copy_list_of")),
	}
}

// hash identifies what the form asks for (with the size of the uploaded
// list, -1 without one): the request hash beside its idempotency key.
func (f newCampaignForm) hash(listSize int64) string {
	b, _ := json.Marshal([]any{f.Name, f.Provider, f.RequiredApprovals, f.Payload, listSize, f.Transactional,
		f.Start, f.ScheduledAt, f.CopyListOf})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Validate checks the form against the configured providers.
func (f *newCampaignForm) Validate(providers []string) error {
	switch {
	case f.Name == "" || len(f.Name) > 200:
		return &onceplan.FieldError{Field: "name", Reason: "is required (at most 200 characters)"}
	case !contains(providers, f.Provider):
		return &onceplan.FieldError{Field: "provider", Reason: "choose one of the configured providers: " + strings.Join(providers, ", ")}
	case f.RequiredApprovals < 1 || f.RequiredApprovals > 10:
		return &onceplan.FieldError{Field: "required_approvals", Reason: "must be a number from 1 to 10"}
	}
	if err := f.readSchedule(); err != nil {
		return err
	}
	return f.Payload.Validate()
}

// readSchedule checks the choice of start and reads its time.
func (f *newCampaignForm) readSchedule() error {
	switch f.Start {
	case "", startManual, startOnApproval:
		if f.ScheduledAt != "" {
			return &onceplan.FieldError{Field: "scheduled_at", Reason: "choose \"at a time\" to start at " + f.ScheduledAt + ", or clear the time"}
		}
		return nil
	case startAt:
	default:
		return &onceplan.FieldError{Field: "start", Reason: "choose when the campaign starts: manual, approval or at"}
	}
	if f.ScheduledAt == "" {
		return &onceplan.FieldError{Field: "scheduled_at", Reason: "give the date and time (UTC) to start at, such as 2030-01-31T09:00"}
	}
	for _, layout := range scheduleLayouts {
		if t, err := time.ParseInLocation(layout, f.ScheduledAt, time.UTC); err == nil {
			f.scheduledAt = &t
			return nil
		}
	}
	return &onceplan.FieldError{Field: "scheduled_at", Reason: fmt.Sprintf("%q is not a date and time (UTC) such as 2030-01-31T09:00", f.ScheduledAt)}
}

// reasonForm is any decision that needs a reason.
type reasonForm struct{ Reason string }

func readReasonForm(c echo.Context) reasonForm {
	return reasonForm{Reason: strings.TrimSpace(c.FormValue("reason"))}
}

// Validate requires a reason of reasonable length.
func (f reasonForm) Validate() error {
	switch {
	case f.Reason == "":
		return &onceplan.FieldError{Field: "reason", Reason: "is required: say why"}
	case len(f.Reason) > 2000:
		return &onceplan.FieldError{Field: "reason", Reason: "is too long (at most 2,000 characters)"}
	}
	return nil
}

// fieldErrors turns a validation error into the form's per-field messages;
// ok is false when err is not a validation error.
func fieldErrors(err error) (map[string]string, bool) {
	var fe *onceplan.FieldError
	if errors.As(err, &fe) {
		return map[string]string{fe.Field: fe.Reason}, true
	}
	var le *plan.ListError
	if errors.As(err, &le) {
		return map[string]string{"targets": "the list was refused: " + le.Error()}, true
	}
	return nil, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

func itoa(n int) string { return strconv.Itoa(n) }
