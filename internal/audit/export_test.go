package audit

// MetricSQL is exported for the EXPLAIN in the tests.
var MetricSQL = metricSQL
