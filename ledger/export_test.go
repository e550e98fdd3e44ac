package ledger

// For the external tests: the claim's own copy of a rule the database
// states for other packages.
var SuppressedInPlan = suppressedInPlan
