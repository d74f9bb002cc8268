package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Nodes = (*DB)(nil)

const nodeColumns = `name, advertise_url, state, vcpus, memory_mb, disk_mb, max_sandboxes, max_starts,
	used_vcpus, used_memory_mb, used_sandboxes, starting, templates, version, registered_at, heartbeat_at, lease_until, lost_at`

func scanNode(row pgx.Row) (*store.Node, error) {
	n := &store.Node{}
	var state string
	var templates []byte
	if err := row.Scan(&n.Name, &n.AdvertiseURL, &state, &n.VCPUs, &n.MemoryMB, &n.DiskMB, &n.MaxSandboxes, &n.MaxStarts,
		&n.UsedVCPUs, &n.UsedMemoryMB, &n.UsedSandboxes, &n.Starting, &templates, &n.Version, &n.RegisteredAt,
		&n.HeartbeatAt, &n.LeaseUntil, &n.LostAt); err != nil {
		return nil, err
	}
	n.State = store.NodeState(state)
	if err := json.Unmarshal(templates, &n.Templates); err != nil {
		return nil, fmt.Errorf("node %s templates: %w", n.Name, err)
	}
	n.RegisteredAt, n.HeartbeatAt, n.LeaseUntil, n.LostAt = utc(n.RegisteredAt), utc(n.HeartbeatAt), utc(n.LeaseUntil), utcPtr(n.LostAt)
	return n, nil
}

// RegisterNode makes n an active node with a lease. A node that registers again keeps what
// placement reserved on it only while it was not lost: a lost node's reservations were given
// back when it was declared lost.
func (db *DB) RegisterNode(ctx context.Context, n *store.Node, lease time.Duration) error {
	if n.Name == "" || n.AdvertiseURL == "" {
		return fmt.Errorf("%w: register node: name and advertise URL are required", store.ErrInvalid)
	}
	templates, err := json.Marshal(orEmptySlice(n.Templates))
	if err != nil {
		return err
	}
	at := now()
	_, err = db.pool.Exec(ctx, `INSERT INTO nodes (name, advertise_url, state, vcpus, memory_mb, disk_mb, max_sandboxes, max_starts,
		templates, version, registered_at, heartbeat_at, lease_until)
		VALUES ($1, $2, 'active', $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)
		ON CONFLICT (name) DO UPDATE SET advertise_url = excluded.advertise_url, state = 'active', vcpus = excluded.vcpus,
			memory_mb = excluded.memory_mb, disk_mb = excluded.disk_mb, max_sandboxes = excluded.max_sandboxes,
			max_starts = excluded.max_starts, templates = excluded.templates, version = excluded.version,
			registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at, lease_until = excluded.lease_until,
			lost_at = NULL, starting = 0`,
		n.Name, n.AdvertiseURL, n.VCPUs, n.MemoryMB, n.DiskMB, n.MaxSandboxes, n.MaxStarts, templates, n.Version, at, at.Add(lease))
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.Name, err)
	}
	return nil
}

func orEmptySlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// RenewLease extends the node's lease, unless it was declared lost.
func (db *DB) RenewLease(ctx context.Context, name string, lease time.Duration, templates []string) (store.NodeState, error) {
	tj, err := json.Marshal(orEmptySlice(templates))
	if err != nil {
		return "", err
	}
	at := now()
	var state string
	err = db.pool.QueryRow(ctx, `UPDATE nodes SET heartbeat_at = $2, lease_until = $3, templates = $4
		WHERE name = $1 AND state IN ('active', 'draining') RETURNING state`, name, at, at.Add(lease), tj).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		n, gerr := db.GetNode(ctx, name)
		if gerr != nil {
			return "", fmt.Errorf("renew lease of %s: %w", name, gerr)
		}
		if n.State == store.NodeLost {
			return n.State, fmt.Errorf("renew lease of %s: lost at %s: %w", name, n.LostAt.Format(time.RFC3339), store.ErrNodeLost)
		}
		return n.State, fmt.Errorf("renew lease of %s: the node is %s", name, n.State)
	}
	if err != nil {
		return "", fmt.Errorf("renew lease of %s: %w", name, err)
	}
	return store.NodeState(state), nil
}

// SetNodeState moves the node to state.
func (db *DB) SetNodeState(ctx context.Context, name string, state store.NodeState) error {
	if _, err := store.ParseNodeState(string(state)); err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `UPDATE nodes SET state = $2 WHERE name = $1`, name, string(state))
	if err != nil {
		return fmt.Errorf("set node %s %s: %w", name, state, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("node %s: %w", name, store.ErrNotFound)
	}
	return nil
}

// GetNode returns the node name.
func (db *DB) GetNode(ctx context.Context, name string) (*store.Node, error) {
	n, err := scanNode(db.pool.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("node %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n, nil
}

// ListNodes returns every node, by name.
func (db *DB) ListNodes(ctx context.Context) ([]*store.Node, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	var out []*store.Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// MarkLostNodes marks the nodes whose lease ended before now as lost; the UPDATE's row locks
// make one caller win each node.
func (db *DB) MarkLostNodes(ctx context.Context, at time.Time) ([]*store.Node, error) {
	rows, err := db.pool.Query(ctx, `UPDATE nodes SET state = 'lost', lost_at = $1
		WHERE state IN ('active', 'draining') AND lease_until < $1 RETURNING `+nodeColumns, at)
	if err != nil {
		return nil, fmt.Errorf("mark lost nodes: %w", err)
	}
	defer rows.Close()
	var out []*store.Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("mark lost nodes: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// Reserve records r when its node and team have room, in one transaction that locks the
// node's row and the team's: racing reservations on one node or team run one after another.
func (db *DB) Reserve(ctx context.Context, r store.Reservation, limits store.TeamLimits) error {
	if r.SandboxID == "" || r.Node == "" || r.TeamID == "" {
		return fmt.Errorf("%w: reserve: sandbox, node and team are required", store.ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT state = 'active' AND used_vcpus + $2 <= vcpus AND used_memory_mb + $3 <= memory_mb
			AND used_sandboxes + 1 <= max_sandboxes AND starting + 1 <= max_starts
			FROM nodes WHERE name = $1 FOR UPDATE`, r.Node, r.VCPUs, r.MemoryMB).Scan(&ok); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("node %s: %w", r.Node, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("node %s: %w", r.Node, store.ErrNodeFull)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO team_usage (team_id) VALUES ($1) ON CONFLICT DO NOTHING`, r.TeamID); err != nil {
			return err
		}
		var sbs, vcpus int
		var mem int64
		if err := tx.QueryRow(ctx, `SELECT sandboxes, vcpus, memory_mb FROM team_usage WHERE team_id = $1 FOR UPDATE`, r.TeamID).Scan(&sbs, &vcpus, &mem); err != nil {
			return err
		}
		switch {
		case limits.Sandboxes > 0 && sbs+1 > limits.Sandboxes:
			return fmt.Errorf("%w: %d sandboxes, the limit is %d", store.ErrTeamQuota, sbs+1, limits.Sandboxes)
		case limits.VCPUs > 0 && vcpus+r.VCPUs > limits.VCPUs:
			return fmt.Errorf("%w: %d vCPUs, the limit is %d", store.ErrTeamQuota, vcpus+r.VCPUs, limits.VCPUs)
		case limits.MemoryMB > 0 && mem+r.MemoryMB > limits.MemoryMB:
			return fmt.Errorf("%w: %d MB, the limit is %d", store.ErrTeamQuota, mem+r.MemoryMB, limits.MemoryMB)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO placements (sandbox_id, node, team_id, vcpus, memory_mb, starting, placed_at)
			VALUES ($1, $2, $3, $4, $5, true, $6)`, r.SandboxID, r.Node, r.TeamID, r.VCPUs, r.MemoryMB, now()); err != nil {
			if isCode(err, uniqueViolation) {
				return fmt.Errorf("sandbox %s is placed already: %w", r.SandboxID, store.ErrConflict)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET used_vcpus = used_vcpus + $2, used_memory_mb = used_memory_mb + $3,
			used_sandboxes = used_sandboxes + 1, starting = starting + 1 WHERE name = $1`, r.Node, r.VCPUs, r.MemoryMB); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE team_usage SET sandboxes = sandboxes + 1, vcpus = vcpus + $2, memory_mb = memory_mb + $3
			WHERE team_id = $1`, r.TeamID, r.VCPUs, r.MemoryMB)
		return err
	})
	if err != nil {
		return fmt.Errorf("reserve %s on %s: %w", r.SandboxID, r.Node, err)
	}
	return nil
}

// StartDone ends the start under way of the sandbox's reservation.
func (db *DB) StartDone(ctx context.Context, sandboxID string) error {
	_, err := db.pool.Exec(ctx, `WITH p AS (UPDATE placements SET starting = false WHERE sandbox_id = $1 AND starting RETURNING node)
		UPDATE nodes SET starting = greatest(0, starting - 1) WHERE name IN (SELECT node FROM p)`, sandboxID)
	if err != nil {
		return fmt.Errorf("start of %s done: %w", sandboxID, err)
	}
	return nil
}

// Release gives back what the sandbox reserved.
func (db *DB) Release(ctx context.Context, sandboxID string) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var r store.Reservation
		err := tx.QueryRow(ctx, `DELETE FROM placements WHERE sandbox_id = $1 RETURNING node, team_id, vcpus, memory_mb, starting`,
			sandboxID).Scan(&r.Node, &r.TeamID, &r.VCPUs, &r.MemoryMB, &r.Starting)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		starting := 0
		if r.Starting {
			starting = 1
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET used_vcpus = greatest(0, used_vcpus - $2), used_memory_mb = greatest(0, used_memory_mb - $3),
			used_sandboxes = greatest(0, used_sandboxes - 1), starting = greatest(0, starting - $4) WHERE name = $1`,
			r.Node, r.VCPUs, r.MemoryMB, starting); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE team_usage SET sandboxes = greatest(0, sandboxes - 1), vcpus = greatest(0, vcpus - $2),
			memory_mb = greatest(0, memory_mb - $3) WHERE team_id = $1`, r.TeamID, r.VCPUs, r.MemoryMB)
		return err
	})
	if err != nil {
		return fmt.Errorf("release %s: %w", sandboxID, err)
	}
	return nil
}

const placementColumns = `sandbox_id, node, team_id, vcpus, memory_mb, starting, placed_at`

func scanPlacement(row pgx.Row) (*store.Reservation, error) {
	r := &store.Reservation{}
	if err := row.Scan(&r.SandboxID, &r.Node, &r.TeamID, &r.VCPUs, &r.MemoryMB, &r.Starting, &r.PlacedAt); err != nil {
		return nil, err
	}
	r.PlacedAt = utc(r.PlacedAt)
	return r, nil
}

// PlacementOf returns where the sandbox is.
func (db *DB) PlacementOf(ctx context.Context, sandboxID string) (*store.Reservation, error) {
	r, err := scanPlacement(db.pool.QueryRow(ctx, `SELECT `+placementColumns+` FROM placements WHERE sandbox_id = $1`, sandboxID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("placement of %s: %w", sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("placement of %s: %w", sandboxID, err)
	}
	return r, nil
}

// PlacementsOn lists the reservations on a node, oldest first.
func (db *DB) PlacementsOn(ctx context.Context, node string) ([]*store.Reservation, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+placementColumns+` FROM placements WHERE node = $1 ORDER BY placed_at, sandbox_id`, node)
	if err != nil {
		return nil, fmt.Errorf("placements on %s: %w", node, err)
	}
	defer rows.Close()
	var out []*store.Reservation
	for rows.Next() {
		r, err := scanPlacement(rows)
		if err != nil {
			return nil, fmt.Errorf("placements on %s: %w", node, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// MovePlacement moves the sandbox's reservation to node to, when to has room.
func (db *DB) MovePlacement(ctx context.Context, sandboxID, to string) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		r, err := scanPlacement(tx.QueryRow(ctx, `SELECT `+placementColumns+` FROM placements WHERE sandbox_id = $1 FOR UPDATE`, sandboxID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("placement of %s: %w", sandboxID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if r.Node == to {
			return nil
		}
		// Lock both nodes in name order: two moves in opposite directions never deadlock.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM nodes WHERE name IN ($1, $2) ORDER BY name FOR UPDATE`, r.Node, to); err != nil {
			return err
		}
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT state = 'active' AND used_vcpus + $2 <= vcpus AND used_memory_mb + $3 <= memory_mb
			AND used_sandboxes + 1 <= max_sandboxes FROM nodes WHERE name = $1`, to, r.VCPUs, r.MemoryMB).Scan(&ok); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("node %s: %w", to, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("node %s: %w", to, store.ErrNodeFull)
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET used_vcpus = greatest(0, used_vcpus - $2), used_memory_mb = greatest(0, used_memory_mb - $3),
			used_sandboxes = greatest(0, used_sandboxes - 1) WHERE name = $1`, r.Node, r.VCPUs, r.MemoryMB); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET used_vcpus = used_vcpus + $2, used_memory_mb = used_memory_mb + $3,
			used_sandboxes = used_sandboxes + 1 WHERE name = $1`, to, r.VCPUs, r.MemoryMB); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE placements SET node = $2 WHERE sandbox_id = $1`, sandboxID, to)
		return err
	})
	if err != nil {
		return fmt.Errorf("move %s to %s: %w", sandboxID, to, err)
	}
	return nil
}
