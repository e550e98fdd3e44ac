package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/executor"
	"github.com/onceplan/onceplan/internal/notify"
	"github.com/onceplan/onceplan/jobs"
)

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()

	t.Run("Zero", func(t *testing.T) {
		t.Parallel()
		c := jobs.Config{}.WithDefaults()
		require.NotNil(t, c.Logger)
		require.Equal(t, executor.DefaultOwnerTimeout, c.OwnerTimeout)
		require.Equal(t, executor.DefaultOwnerTimeout/jobs.HeartbeatsPerOwnerTimeout, c.HeartbeatInterval)
		require.Equal(t, jobs.DefaultMaintenanceInterval, c.MaintenanceInterval)
		require.Equal(t, jobs.DefaultJobTimeout, c.JobTimeout)
		require.Equal(t, jobs.DefaultJobTimeout+jobs.DefaultRescueMargin, c.RescueAfter)
		require.Equal(t, jobs.DefaultMaxAttempts, c.MaxAttempts)
		require.Equal(t, jobs.DefaultWorkersPerQueue, c.WorkersPerQueue)
		require.Equal(t, executor.DefaultPausedSnooze, c.PausedSnooze)
		require.Equal(t, jobs.DefaultFetchCooldown, c.FetchCooldown)
		require.Equal(t, time.Second, c.QuotaBackoffStart)
		require.Equal(t, time.Minute, c.QuotaBackoffMax, "never longer than the flat pause it replaces")
		require.Equal(t, notify.DefaultWindow, c.NotifyWindow)
		require.Equal(t, notify.DefaultWindow/notify.WaitPerWindow, c.NotifyWait)
		require.Equal(t, jobs.DefaultNotifyMaxAttempts, c.NotifyMaxAttempts)
		require.Equal(t, jobs.DefaultNotifyRetryBase, c.NotifyRetryBase)
		require.NoError(t, c.Validate())
		require.Equal(t, c, c.WithDefaults(), "applying the defaults twice changes nothing")
	})

	t.Run("DerivedDefaultsFollow", func(t *testing.T) {
		t.Parallel()
		c := jobs.Config{JobTimeout: 5 * time.Minute, OwnerTimeout: 12 * time.Second}.WithDefaults()
		require.Equal(t, 6*time.Minute, c.RescueAfter)
		require.Equal(t, 2*time.Second, c.HeartbeatInterval)
		require.NoError(t, c.Validate())
		require.Equal(t, 6*time.Second, jobs.Config{NotifyWindow: time.Minute}.WithDefaults().NotifyWait, "the wait follows the window")
	})

	t.Run("SetValuesStay", func(t *testing.T) {
		t.Parallel()
		set := jobs.Config{
			OwnerTimeout: time.Minute, HeartbeatInterval: 7 * time.Second, MaintenanceInterval: time.Second,
			JobTimeout: time.Second, RescueAfter: time.Hour, MaxAttempts: 2, WorkersPerQueue: 3,
			PausedSnooze: time.Millisecond, FetchCooldown: 5 * time.Millisecond,
			QuotaBackoffStart: time.Millisecond, QuotaBackoffMax: time.Hour,
			NotifyWindow: time.Minute, NotifyWait: time.Second, NotifyMaxAttempts: 3, NotifyRetryBase: time.Millisecond,
		}
		c := set.WithDefaults()
		c.Logger = nil
		require.Equal(t, set, c)
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  jobs.Config
		want string
	}{
		{jobs.Config{JobTimeout: 5 * time.Minute, RescueAfter: time.Minute}, "jobs: RescueAfter 1m0s: want more than JobTimeout 5m0s"},
		{jobs.Config{RescueAfter: jobs.DefaultJobTimeout}, "jobs: RescueAfter 2m0s: want more than JobTimeout 2m0s"},
		{jobs.Config{OwnerTimeout: -time.Second}, "jobs: OwnerTimeout -1s: want a positive duration"},
		{jobs.Config{OwnerTimeout: 5}, "jobs: HeartbeatInterval 0s: want a positive duration"},
		{jobs.Config{OwnerTimeout: time.Second, HeartbeatInterval: time.Second}, "jobs: HeartbeatInterval 1s: want less than OwnerTimeout 1s"},
		{jobs.Config{MaintenanceInterval: -time.Second}, "jobs: MaintenanceInterval -1s: want a positive duration"},
		{jobs.Config{JobTimeout: -time.Second}, "jobs: JobTimeout -1s: want a positive duration"},
		{jobs.Config{RescueAfter: -time.Second}, "jobs: RescueAfter -1s: want a positive duration"},
		{jobs.Config{PausedSnooze: -time.Second}, "jobs: PausedSnooze -1s: want a positive duration"},
		{jobs.Config{MaxAttempts: -1}, "jobs: MaxAttempts -1: want a positive number"},
		{jobs.Config{WorkersPerQueue: -1}, "jobs: WorkersPerQueue -1: want a number from 1 to 10000"},
		{jobs.Config{WorkersPerQueue: 10_001}, "jobs: WorkersPerQueue 10001: want a number from 1 to 10000"},
		{jobs.Config{FetchCooldown: 2 * time.Second}, "jobs: FetchCooldown 2s: want a duration from 1ms to 1s"},
		{jobs.Config{NotifyWindow: -time.Second}, "jobs: NotifyWindow -1s: want a positive duration"},
		{jobs.Config{NotifyRetryBase: -time.Second}, "jobs: NotifyRetryBase -1s: want a positive duration"},
		{jobs.Config{NotifyMaxAttempts: -1}, "jobs: NotifyMaxAttempts -1: want a positive number"},
		{jobs.Config{QuotaBackoffStart: -time.Second}, "jobs: QuotaBackoffStart -1s: want a positive duration"},
		{jobs.Config{QuotaBackoffStart: 2 * time.Minute}, "jobs: QuotaBackoffMax 1m0s: want at least QuotaBackoffStart 2m0s"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		require.EqualError(t, err, tc.want)
		var ce *jobs.ConfigError
		require.True(t, errors.As(err, &ce), tc.want)
	}
	require.NoError(t, jobs.Config{WorkersPerQueue: jobs.MaxWorkersPerQueue}.WithDefaults().Validate())
}

// TestNewRunnerValidates: NewRunner refuses what Validate refuses, before
// it touches the pool (there is none here).
func TestNewRunnerValidates(t *testing.T) {
	t.Parallel()
	_, err := jobs.NewRunner(jobs.Config{JobTimeout: 5 * time.Minute, RescueAfter: time.Minute})
	require.EqualError(t, err, "jobs: RescueAfter 1m0s: want more than JobTimeout 5m0s")
}
