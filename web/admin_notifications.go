package web

import (
	"cmp"
	"context"

	"github.com/onceplan/onceplan/notify"
	"github.com/onceplan/onceplan/web/view"
)

// undeliveredShown bounds the admin page's list of notifications not
// delivered.
const undeliveredShown = 50

// notificationsSection gathers the admin page's notifications: each
// configured notifier with its notifications by state, and the latest
// notifications not delivered with the notifier's last answer.
func (s *Server) notificationsSection(ctx context.Context) (view.NotificationsSection, error) {
	var sec view.NotificationsSection
	counts, err := notify.StateCounts(ctx, s.cfg.Pool)
	if err != nil {
		return sec, err
	}
	for _, n := range s.cfg.Notifiers.All() {
		row := view.NotifierRow{Name: n.Name(), Kind: n.Kind(), URL: n.String(), Signed: n.Signed()}
		for _, e := range n.Events() {
			row.Events = append(row.Events, string(e))
		}
		c := counts[n.Name()]
		row.Pending, row.Retrying, row.Failed, row.Delivered = c[notify.StatePending], c[notify.StateRetrying], c[notify.StateFailed], c[notify.StateDelivered]
		sec.Notifiers = append(sec.Notifiers, row)
	}
	sec.Window = cmp.Or(s.cfg.NotifyWindow, notify.DefaultWindow).String()
	ds, err := notify.Undelivered(ctx, s.cfg.Pool, undeliveredShown)
	if err != nil {
		return sec, err
	}
	for _, d := range ds {
		sec.Undelivered = append(sec.Undelivered, view.DeliveryRow{
			ID: d.ID, Created: d.CreatedAt, Event: string(d.Event), CampaignID: d.CampaignID, CampaignName: d.CampaignName,
			Notifier: d.Notifier, Recipient: d.Recipient, State: d.State, Attempts: d.Attempts, LastAt: d.LastAt,
			HTTPStatus: d.HTTPStatus, Answer: d.Answer, Error: d.Error,
		})
	}
	return sec, nil
}
