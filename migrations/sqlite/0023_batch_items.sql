-- Batch steps: each item of a step with `for_each` is a row of its own, whose id is the
-- item's identity (`<step>[<item key>]`), so its attempts, receipt and external key are its
-- own. `batch_of` names the step it is an item of, `item` holds the item (JSON).
ALTER TABLE steps ADD COLUMN batch_of TEXT;
ALTER TABLE steps ADD COLUMN item_key TEXT;
ALTER TABLE steps ADD COLUMN item TEXT;
CREATE INDEX steps_items ON steps (workflow_id, batch_of, state) WHERE batch_of IS NOT NULL;
