package jobs

// NotifyBackoff is notifyBackoff, for the tests of package jobs_test.
var NotifyBackoff = notifyBackoff
