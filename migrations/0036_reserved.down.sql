-- Version 0036 belongs to another branch of the same change (issue 40).
-- This file only keeps the versions contiguous on this branch, which adds
-- 0037; delete it when the branch that owns 0036 is merged.
SELECT 1;
