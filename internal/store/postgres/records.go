package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Records = (*DB)(nil)

// InsertSnapshot stores a new snapshot record, its config sealed.
func (db *DB) InsertSnapshot(ctx context.Context, sn *store.Snapshot) error {
	md, err := json.Marshal(orEmpty(sn.Metadata))
	if err != nil {
		return fmt.Errorf("insert snapshot %s: %w", sn.ID, err)
	}
	config, err := db.sealText(store.SnapshotSealName(sn.ID), string(sn.Config))
	if err != nil {
		return fmt.Errorf("insert snapshot %s: %w", sn.ID, err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO snapshots (id, node, team_id, name, sandbox_id, template_id, runtime, metadata, created_at, bytes, config)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, sn.ID, sn.Node, sn.TeamID, sn.Name, sn.SandboxID, sn.TemplateID, sn.Runtime, md,
		sn.CreatedAt.UTC(), sn.Bytes, config)
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("insert snapshot %s: %w", sn.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("insert snapshot %s: %w", sn.ID, err)
	}
	return nil
}

const snapshotColumns = `id, node, team_id, name, sandbox_id, template_id, runtime, metadata, created_at, bytes, config`

func (db *DB) scanSnapshot(row pgx.Row) (*store.Snapshot, error) {
	var sn store.Snapshot
	var md []byte
	var config string
	if err := row.Scan(&sn.ID, &sn.Node, &sn.TeamID, &sn.Name, &sn.SandboxID, &sn.TemplateID, &sn.Runtime, &md, &sn.CreatedAt, &sn.Bytes, &config); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(md, &sn.Metadata); err != nil {
		return nil, fmt.Errorf("snapshot %s metadata: %w", sn.ID, err)
	}
	if len(sn.Metadata) == 0 {
		sn.Metadata = nil
	}
	plain, err := db.openText(store.SnapshotSealName(sn.ID), config)
	if err != nil {
		return nil, err
	}
	if plain != "" {
		sn.Config = []byte(plain)
	}
	sn.CreatedAt = utc(sn.CreatedAt)
	return &sn, nil
}

// GetSnapshot returns snapshot id.
func (db *DB) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	sn, err := db.scanSnapshot(db.pool.QueryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("snapshot %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return sn, nil
}

// ListSnapshots returns the snapshots f selects, newest first.
func (db *DB) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]*store.Snapshot, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE ($5 OR node = $1)
		AND ($2 = '' OR team_id = $2) AND ($3 = '' OR sandbox_id = $3) AND ($4 = '' OR name = $4)
		ORDER BY created_at DESC, id DESC`, f.Node, f.TeamID, f.SandboxID, f.Name, f.AllNodes)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	var out []*store.Snapshot
	for rows.Next() {
		sn, err := db.scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, sn)
	}
	return out, rows.Err()
}

// DeleteSnapshot removes snapshot id's record.
func (db *DB) DeleteSnapshot(ctx context.Context, id string) error {
	return deleted(db.pool.Exec(ctx, `DELETE FROM snapshots WHERE id = $1`, id))("snapshot " + id)
}

// deleted turns an exec's result into ErrNotFound when it touched no row.
func deleted(tag pgconn.CommandTag, err error) func(what string) error {
	return func(what string) error {
		if err != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("delete %s: %w", what, store.ErrNotFound)
		}
		return nil
	}
}

// InsertVolume stores a new volume record, its token sealed.
func (db *DB) InsertVolume(ctx context.Context, v *store.Volume) error {
	token, err := db.sealText(store.VolumeSealName(v.ID), v.Token)
	if err != nil {
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO volumes (id, node, team_id, name, token, created_at, size_bytes, version, used_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		v.ID, v.Node, v.TeamID, v.Name, token, v.CreatedAt.UTC(), v.SizeBytes, v.Version, v.UsedBytes)
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("insert volume %s: %w", v.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("insert volume %s: %w", v.Name, err)
	}
	return nil
}

const volumeColumns = `id, node, team_id, name, token, created_at, size_bytes, version, used_bytes`

func (db *DB) scanVolume(row pgx.Row) (*store.Volume, error) {
	var v store.Volume
	var token string
	if err := row.Scan(&v.ID, &v.Node, &v.TeamID, &v.Name, &token, &v.CreatedAt, &v.SizeBytes, &v.Version, &v.UsedBytes); err != nil {
		return nil, err
	}
	var err error
	if v.Token, err = db.openText(store.VolumeSealName(v.ID), token); err != nil {
		return nil, err
	}
	v.CreatedAt = utc(v.CreatedAt)
	return &v, nil
}

// GetVolume returns volume id.
func (db *DB) GetVolume(ctx context.Context, id string) (*store.Volume, error) {
	v, err := db.scanVolume(db.pool.QueryRow(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("volume %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, err)
	}
	return v, nil
}

// ListVolumes returns node's volumes (every node's when store.AllNodes) of teamID (every
// team's when ""), oldest first.
func (db *DB) ListVolumes(ctx context.Context, node, teamID string) ([]*store.Volume, error) {
	// Two queries rather than an OR on a parameter, so one node's listing keeps its index.
	q, args := `SELECT `+volumeColumns+` FROM volumes WHERE node = $1 AND ($2 = '' OR team_id = $2) ORDER BY created_at, id`, []any{node, teamID}
	if node == store.AllNodes {
		q, args = `SELECT `+volumeColumns+` FROM volumes WHERE $1 = '' OR team_id = $1 ORDER BY created_at, id`, []any{teamID}
	}
	rows, err := db.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	var out []*store.Volume
	for rows.Next() {
		v, err := db.scanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// MoveVolume hands volume id from node from to node to, at version and usedBytes; ErrConflict
// when from does not hold it.
func (db *DB) MoveVolume(ctx context.Context, id, from, to string, version, usedBytes int64) error {
	tag, err := db.pool.Exec(ctx, `UPDATE volumes SET node = $1, version = $2, used_bytes = $3 WHERE id = $4 AND node = $5`, to, version, usedBytes, id, from)
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("move volume %s to node %q: %w: the team has a volume of its name there", id, to, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("move volume %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		if _, gerr := db.GetVolume(ctx, id); gerr != nil {
			return gerr
		}
		return fmt.Errorf("move volume %s from node %q: %w: another node holds it", id, from, store.ErrConflict)
	}
	return nil
}

// DeleteVolume removes volume id's record; its leases go with it (ON DELETE CASCADE).
func (db *DB) DeleteVolume(ctx context.Context, id string) error {
	return deleted(db.pool.Exec(ctx, `DELETE FROM volumes WHERE id = $1`, id))("volume " + id)
}

// PutVolumeLease stores l, replacing its sandbox's lease on its volume.
func (db *DB) PutVolumeLease(ctx context.Context, l *store.VolumeLease) error {
	paths, err := json.Marshal(orEmptySlice(l.Paths))
	if err != nil {
		return fmt.Errorf("lease of volume %s: %w", l.VolumeID, err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO volume_leases (volume_id, sandbox_id, read_only, paths) VALUES ($1, $2, $3, $4)
		ON CONFLICT (volume_id, sandbox_id) DO UPDATE SET read_only = excluded.read_only, paths = excluded.paths`,
		l.VolumeID, l.SandboxID, l.ReadOnly, paths)
	if isCode(err, foreignKeyViolation) {
		return fmt.Errorf("lease of volume %s: %w", l.VolumeID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("lease of volume %s: %w", l.VolumeID, err)
	}
	return nil
}

// VolumeLeases returns volume id's leases, by sandbox id.
func (db *DB) VolumeLeases(ctx context.Context, volumeID string) ([]*store.VolumeLease, error) {
	rows, err := db.pool.Query(ctx, `SELECT sandbox_id, read_only, paths FROM volume_leases WHERE volume_id = $1 ORDER BY sandbox_id`, volumeID)
	if err != nil {
		return nil, fmt.Errorf("leases of volume %s: %w", volumeID, err)
	}
	defer rows.Close()
	var out []*store.VolumeLease
	for rows.Next() {
		l := &store.VolumeLease{VolumeID: volumeID}
		var paths []byte
		if err := rows.Scan(&l.SandboxID, &l.ReadOnly, &paths); err != nil {
			return nil, fmt.Errorf("leases of volume %s: %w", volumeID, err)
		}
		if err := json.Unmarshal(paths, &l.Paths); err != nil {
			return nil, fmt.Errorf("leases of volume %s: %w", volumeID, err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// DeleteVolumeLease removes a sandbox's lease on a volume.
func (db *DB) DeleteVolumeLease(ctx context.Context, volumeID, sandboxID string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM volume_leases WHERE volume_id = $1 AND sandbox_id = $2`, volumeID, sandboxID); err != nil {
		return fmt.Errorf("release volume %s: %w", volumeID, err)
	}
	return nil
}

// PutNetworkRecord stores r, its config sealed, replacing the record of its node and sandbox.
func (db *DB) PutNetworkRecord(ctx context.Context, r *store.NetworkRecord) error {
	config, err := db.sealText(store.NetworkSealName(r.Node, r.SandboxID), string(r.Config))
	if err != nil {
		return fmt.Errorf("record network of %s: %w", r.SandboxID, err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO network_records (node, sandbox_id, slot_index, link, addr, netns, resolv_conf, config, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (node, sandbox_id) DO UPDATE SET slot_index = excluded.slot_index, link = excluded.link, addr = excluded.addr,
			netns = excluded.netns, resolv_conf = excluded.resolv_conf, config = excluded.config, updated_at = excluded.updated_at`,
		r.Node, r.SandboxID, r.Index, r.Link, r.Addr, r.Netns, r.ResolvConf, config, r.UpdatedAt.UTC())
	if err != nil {
		return fmt.Errorf("record network of %s: %w", r.SandboxID, err)
	}
	return nil
}

// NetworkRecords returns node's records, by sandbox id.
func (db *DB) NetworkRecords(ctx context.Context, node string) ([]*store.NetworkRecord, error) {
	rows, err := db.pool.Query(ctx, `SELECT sandbox_id, slot_index, link, addr, netns, resolv_conf, config, updated_at
		FROM network_records WHERE node = $1 ORDER BY sandbox_id`, node)
	if err != nil {
		return nil, fmt.Errorf("network records: %w", err)
	}
	defer rows.Close()
	var out []*store.NetworkRecord
	for rows.Next() {
		r := &store.NetworkRecord{Node: node}
		var config string
		var updated time.Time
		if err := rows.Scan(&r.SandboxID, &r.Index, &r.Link, &r.Addr, &r.Netns, &r.ResolvConf, &config, &updated); err != nil {
			return nil, fmt.Errorf("network records: %w", err)
		}
		plain, err := db.openText(store.NetworkSealName(node, r.SandboxID), config)
		if err != nil {
			return nil, fmt.Errorf("network record of %s: %w", r.SandboxID, err)
		}
		if plain != "" {
			r.Config = []byte(plain)
		}
		r.UpdatedAt = utc(updated)
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteNetworkRecord removes node's record of a sandbox.
func (db *DB) DeleteNetworkRecord(ctx context.Context, node, sandboxID string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM network_records WHERE node = $1 AND sandbox_id = $2`, node, sandboxID); err != nil {
		return fmt.Errorf("drop network record of %s: %w", sandboxID, err)
	}
	return nil
}
