-- Nothing reads the journal by time: the status API reads a saga's journal
-- by saga id (journal_saga_idx) and retention deletes it with its saga. The
-- index only cost an entry per journal row (four or more per saga).
DROP INDEX IF EXISTS {{schema}}.journal_at_idx;
