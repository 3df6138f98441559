-- An operator action's answer is a domain result, not an HTTP response: a refused action
-- keeps its refusal's code beside the message; an applied one its step projection alone.
ALTER TABLE operator_actions ADD COLUMN refusal TEXT;
UPDATE operator_actions
   SET refusal = 'refused',
       answer = COALESCE(answer::jsonb #>> '{error,message}', answer)
 WHERE status IS NOT NULL AND status <> 200;
ALTER TABLE operator_actions DROP COLUMN status;
