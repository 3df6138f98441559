-- The adapter's result as decided at checkpoint 5 (JSON), so that recovery after a crash
-- between checkpoints 5 and 6 resumes from it instead of asking the provider again.
ALTER TABLE attempts ADD COLUMN result TEXT;
