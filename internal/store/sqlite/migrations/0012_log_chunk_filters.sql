-- A word filter per log chunk (see internal/store/sqlite/logfilter.go), so a search skips the
-- chunks that cannot hold its terms instead of decoding every line of a sandbox. In a table of
-- its own, not a column of log_chunks: a column added there would sit after the chunk's data
-- blob, where reading it walks the blob's overflow pages.
--
-- Chunks written before this migration have no row and are read by every search until the
-- server fills their filters in the background after start. Numbered 0012, not 0007, so it
-- stays clear of migrations written on parallel branches.
CREATE TABLE log_chunk_filters (
    chunk_id INTEGER PRIMARY KEY, -- log_chunks.id
    filter   BLOB NOT NULL        -- a power-of-two number of bytes, at least 128
) STRICT;

-- Whatever deletes a chunk (pruning, retention) deletes its filter.
CREATE TRIGGER log_chunk_filters_gc AFTER DELETE ON log_chunks BEGIN
    DELETE FROM log_chunk_filters WHERE chunk_id = OLD.id;
END;
