-- The exactly-once audit (package audit) counts a plan's targets by the
-- newest attempt at each target's current epoch. The attempts a plan made
-- carry its id and the target's ordinal; this index finds them, with what
-- the count reads, without touching the table or the rest of the ledger:
-- a million-target plan is audited by one index-only range scan, and the
-- cost does not grow with the other campaigns in the ledger.
CREATE INDEX effect_plan_target ON effect (plan_id, ordinal) INCLUDE (epoch, state, id)
    WHERE plan_id IS NOT NULL;
