-- Batch steps: each item of a step with `for_each` is a row of its own, whose id is the
-- item's identity (`<step>[<item key>]`), so its attempts, receipt and external key are its
-- own. `batch_of` names the step it is an item of, `item` holds the item (JSON) and
-- `item_index` its place in the list. The batch step's own row, once its items exist,
-- records how many there are (`items`) and how many may run at once (`max_parallel`).
ALTER TABLE steps ADD COLUMN batch_of TEXT;
ALTER TABLE steps ADD COLUMN item_key TEXT;
ALTER TABLE steps ADD COLUMN item TEXT;
ALTER TABLE steps ADD COLUMN item_index BIGINT;
ALTER TABLE steps ADD COLUMN items BIGINT;
ALTER TABLE steps ADD COLUMN max_parallel BIGINT;
CREATE INDEX steps_items ON steps (workflow_id, batch_of, state, item_index)
    WHERE batch_of IS NOT NULL;
