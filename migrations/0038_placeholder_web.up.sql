-- Placeholder for another helper's migration 0038 of issue 40, so that this
-- branch's migrations are contiguous: the lead drops this file when merging.
SELECT 1;
