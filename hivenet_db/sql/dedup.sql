-- dedup: filled in by its issue.
SELECT 1;
