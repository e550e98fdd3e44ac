package web

import (
	"cmp"
	"context"

	"github.com/onceplan/onceplan/internal/notify"
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
	sec.Undelivered = ds
	return sec, nil
}
