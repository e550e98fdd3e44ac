package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/notify"
)

// NotifyQueue runs the notifications' jobs: announcements and deliveries.
// Only processes with notifiers (--notify) work it, and it is apart from
// the providers' queues, so that a slow notifier never holds up a
// campaign and a campaign never holds up a notification.
const NotifyQueue = "onceplan_notify"

// notifyWorkers is how many notification jobs one process works on at
// once: a notifier that hangs holds one until its timeout.
const notifyWorkers = 8

// recordMargin is what a delivery job's time adds to its notifier's
// timeout: the query before the call and the record after it.
const recordMargin = 30 * time.Second

// AnnounceArgs expands one source — a recorded decision (Event, a
// campaign_event id) or an attention batch (Attention) — into its
// notifications, and enqueues their deliveries, in one transaction.
type AnnounceArgs struct {
	Event     int64 `json:"event,omitempty"`
	Attention int64 `json:"attention,omitempty"`
}

// Kind is River's name for the job kind.
func (AnnounceArgs) Kind() string { return "onceplan_notify_announce" }

// InsertOpts puts it on the notifications' queue.
func (AnnounceArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: NotifyQueue} }

// DeliverArgs delivers one notification. Notifier only sizes the job's
// time; what is sent, and through which notifier, is the notification's
// row.
type DeliverArgs struct {
	Notification int64  `json:"notification"`
	Notifier     string `json:"notifier"`
}

// Kind is River's name for the job kind.
func (DeliverArgs) Kind() string { return "onceplan_notify_deliver" }

// InsertOpts puts it on the notifications' queue.
func (DeliverArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: NotifyQueue} }

// Announcer implements approval.Announcer: a trail entry that package
// notify announces gets one AnnounceArgs job, inserted in the entry's
// transaction.
type Announcer struct {
	client      *river.Client[pgx.Tx]
	maxAttempts int
}

// Announce enqueues the announcement of e in tx, if e's action is
// announced.
func (a *Announcer) Announce(ctx context.Context, tx pgx.Tx, e approval.Event) error {
	if !notify.Announced(e.Action) {
		return nil
	}
	return a.insert(ctx, tx, AnnounceArgs{Event: e.ID})
}

// insert enqueues one announcement in tx, with the notifications' bound
// on tries.
func (a *Announcer) insert(ctx context.Context, tx pgx.Tx, args AnnounceArgs) error {
	_, err := a.client.InsertTx(ctx, tx, args, &river.InsertOpts{MaxAttempts: a.maxAttempts})
	return err
}

// Announcer is what the approval service announces its decisions
// through (approval.Service.Announcer): nil without notifiers.
func (r *Runner) Announcer() approval.Announcer {
	if r.announcer == nil {
		return nil
	}
	return r.announcer
}

// Notify is this process's notification service (nil without notifiers,
// or on an insert-only runner).
func (r *Runner) Notify() *notify.Service { return r.notify }

type announceWorker struct {
	river.WorkerDefaults[AnnounceArgs]
	svc         *notify.Service
	maxAttempts int
}

func (w *announceWorker) Work(ctx context.Context, job *river.Job[AnnounceArgs]) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	_, err = w.svc.Expand(ctx, notify.Source{Event: job.Args.Event, Attention: job.Args.Attention},
		func(ctx context.Context, tx pgx.Tx, recs []notify.Recorded) error {
			params := make([]river.InsertManyParams, len(recs))
			for i, rec := range recs {
				params[i] = river.InsertManyParams{Args: DeliverArgs{Notification: rec.ID, Notifier: rec.Notifier},
					InsertOpts: &river.InsertOpts{MaxAttempts: w.maxAttempts}}
			}
			_, err := client.InsertManyTx(ctx, tx, params)
			return err
		})
	return err
}

type deliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	svc       *notify.Service
	retryBase time.Duration
}

// Timeout bounds the job by its notifier's timeout, plus the time to read
// and record.
func (w *deliverWorker) Timeout(job *river.Job[DeliverArgs]) time.Duration {
	if n, ok := w.svc.Notifiers().Get(job.Args.Notifier); ok {
		return n.Timeout() + recordMargin
	}
	return notify.MailTimeout + recordMargin
}

// NextRetry backs off from the retry base, doubling, at most
// NotifyRetryMax.
func (w *deliverWorker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	return time.Now().Add(notifyBackoff(w.retryBase, job.Attempt))
}

// notifyBackoff is the wait after the attempt-th try: base, 2×base, 4×base
// …, at most NotifyRetryMax.
func notifyBackoff(base time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < NotifyRetryMax; i++ {
		d *= 2
	}
	return min(d, NotifyRetryMax)
}

func (w *deliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	res, err := w.svc.Deliver(ctx, job.Args.Notification, job.Attempt, job.Attempt >= job.MaxAttempts)
	switch res {
	case notify.Delivered:
		return nil
	case notify.GaveUp:
		return river.JobCancel(err)
	}
	return err
}

// attentionLock serialises the attention scans across processes.
const attentionLock = 0x6f6e63656e6f7469 // "oncenoti"

// attentionInterval is how often the attention scan runs: every
// MaintenanceInterval, but no more often than twice per NotifyWait, which
// is all the batching needs (a scan counts every running campaign's
// targets, as a run page does).
func (c Config) attentionInterval() time.Duration {
	return max(c.MaintenanceInterval, c.NotifyWait/2)
}

// attentionLoop scans for targets that need attention (attentionInterval),
// one process at a time. Like maintenance, it does not use River's
// periodic jobs, which run only on River's elected leader (a leader
// without notifiers would never scan).
func (r *Runner) attentionLoop(ctx context.Context) {
	r.lockedLoop(ctx, r.attentionDone, r.cfg.attentionInterval(), attentionLock,
		"notifications: scanning for targets that need attention", r.scanAttention)
}

// scanAttention is one attention scan (under attentionLock).
func (r *Runner) scanAttention(ctx context.Context) error {
	found, err := r.notify.ScanAttention(ctx, func(ctx context.Context, tx pgx.Tx, a notify.NewAttention) error {
		// r.announcer exists whenever r.notify does (NewRunner).
		return r.announcer.insert(ctx, tx, AnnounceArgs{Attention: a.ID})
	})
	for _, a := range found {
		r.cfg.Logger.Info("notifications: targets need attention", "campaign", a.CampaignID, "batch", a.ID)
	}
	return err
}
