package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cove-dev/cove/internal/store"
)

// Secrets a record keeps in a text column (a sandbox's envd access token, a webhook's signing
// secret) are written sealed when the DB has a sealer: "sealed:v1:" and the base64 of what the
// sealer made, under a name that ties it to its row ("envd-token-<sandbox id>"). A value
// without the prefix is one written before sealing began; Open with a sealer seals those.

// Option configures Open.
type Option func(*DB)

// WithSealer makes the DB seal the secrets its records keep, and seal at Open those an older
// release left in the clear.
func WithSealer(s store.Sealer) Option { return func(db *DB) { db.seal = s } }

var (
	tokenName   = store.TokenSealName
	webhookName = store.WebhookSealName
)

func (db *DB) sealText(name, plain string) (string, error) {
	return store.SealText(db.seal, name, plain)
}
func (db *DB) openText(name, stored string) (string, error) {
	return store.OpenText(db.seal, name, stored)
}

// sealClear seals, in one transaction, the envd tokens and webhook secrets written in the
// clear before this release.
func (db *DB) sealClear(ctx context.Context) error {
	if db.seal == nil {
		return nil
	}
	// secure_delete zeroes the clear values' old cells as they are overwritten, so the file
	// does not keep them in its free space; only for this pass (it costs every later delete).
	if _, err := db.write.ExecContext(ctx, `PRAGMA secure_delete = ON`); err != nil {
		return err
	}
	defer db.write.ExecContext(ctx, `PRAGMA secure_delete = OFF`)
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		for _, c := range []struct {
			table, column string
			name          func(string) string
		}{{"sandboxes", "envd_access_token", tokenName}, {"webhooks", "secret", webhookName}} {
			rows, err := tx.QueryContext(ctx, `SELECT id, `+c.column+` FROM `+c.table+
				` WHERE `+c.column+` != '' AND `+c.column+` NOT LIKE 'sealed:v1:%'`)
			if err != nil {
				return err
			}
			clear := map[string]string{}
			for rows.Next() {
				var id, v string
				if err := rows.Scan(&id, &v); err != nil {
					rows.Close()
					return err
				}
				clear[id] = v
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
			for id, v := range clear {
				sealed, err := db.sealText(c.name(id), v)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `UPDATE `+c.table+` SET `+c.column+` = ? WHERE id = ?`, sealed, id); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
