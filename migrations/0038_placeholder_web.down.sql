-- Placeholder (see the up file): the lead drops this file when merging.
SELECT 1;
