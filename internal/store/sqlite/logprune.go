package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// PruneLogs deletes the chunks whose newest line is older than olderThan, at most
// pruneChunkRows chunks per transaction. A
// chunk that straddles olderThan is kept whole until all of its lines are older: a chunk
// spans one write batch, so its lines outlive the cutoff by at most the batch's time span.
// The count is of the lines deleted.
func (db *DB) PruneLogs(ctx context.Context, olderThan time.Time) (int64, error) {
	cutoff := toMicros(olderThan)
	var total int64
	for {
		rows, err := db.read.QueryContext(ctx, `SELECT id, lines FROM log_chunks WHERE max_ts < ?
			ORDER BY max_ts LIMIT ?`, cutoff, pruneChunkRows)
		if err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		var ids, counts []int64
		for rows.Next() {
			var id, n int64
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return total, fmt.Errorf("prune logs: %w", err)
			}
			ids, counts = append(ids, id), append(counts, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		var deleted int64
		err = db.writeTx(ctx, func(tx *sql.Tx) error {
			deleted = 0
			for i, id := range ids {
				if _, err := tx.ExecContext(ctx, `DELETE FROM log_chunk_requests WHERE chunk_id = ?`, id); err != nil {
					return err
				}
				res, err := tx.ExecContext(ctx, `DELETE FROM log_chunks WHERE id = ?`, id)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n > 0 {
					deleted += counts[i]
				}
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		total += deleted
	}
	return total, nil
}

// pruneChunkRows bounds the chunks one prune transaction deletes.
const pruneChunkRows = 100
