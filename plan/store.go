package plan

// RunsPlanSQL is the SQL condition that the campaign campaignExpr runs the
// plan planExpr now: a claim's gate (ledger.Gate), checked in the
// statement that claims.
func RunsPlanSQL(campaignExpr, planExpr string) string {
	return "EXISTS (SELECT 1 FROM campaign c WHERE c.id = " + campaignExpr + " AND c.state = 'running' AND c.plan_id = " + planExpr + ")"
}

// TargetAddressSQL is the SQL expression for the address of the target
// ordinal ordinalExpr of plan planExpr (its normalised address, as the
// import wrote it).
func TargetAddressSQL(planExpr, ordinalExpr string) string {
	return "(SELECT tt.target FROM plan tp JOIN target tt ON tt.list_id = tp.list_id AND tt.ordinal = " + ordinalExpr + " WHERE tp.id = " + planExpr + ")"
}
