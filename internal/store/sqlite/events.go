package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.EventStore = (*DB)(nil)

// maxEventLimit bounds an event page; 0 asks for defaultEventLimit.
const (
	maxEventLimit     = 1000
	defaultEventLimit = 100
)

const eventColumns = `id, type, ts, team_id, sandbox_id, template_id, metadata, request_id, api_key_id, data`

// InsertEvent stores ev and queues one pending delivery for each of its team's webhooks
// subscribed to ev.Type, in one transaction.
func (db *DB) InsertEvent(ctx context.Context, ev *store.Event) (int, error) {
	if ev.ID == "" || ev.Type == "" || ev.TeamID == "" {
		return 0, fmt.Errorf("insert event: id, type and team are required")
	}
	data := ev.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if !json.Valid(data) || !strings.HasPrefix(strings.TrimSpace(string(data)), "{") {
		return 0, fmt.Errorf("insert event %s: data is not a JSON object", ev.ID)
	}
	metadata, err := jsonOrNull(ev.Metadata, ev.Metadata == nil)
	if err != nil {
		return 0, fmt.Errorf("insert event %s: metadata: %w", ev.ID, err)
	}
	var n int
	err = db.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (`+eventColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			ev.ID, ev.Type, toMicros(ev.Timestamp), ev.TeamID, ev.SandboxID, ev.TemplateID,
			metadata, ev.RequestID, ev.APIKeyID, string(data)); err != nil {
			if isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
				return fmt.Errorf("insert event %s: %w", ev.ID, store.ErrConflict)
			}
			return fmt.Errorf("insert event %s: %w", ev.ID, err)
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM webhooks WHERE team_id = ?
			AND EXISTS (SELECT 1 FROM json_each(webhooks.events) AS e WHERE e.value = ?)
			ORDER BY created_at, id`, ev.TeamID, ev.Type)
		if err != nil {
			return fmt.Errorf("insert event %s: webhooks: %w", ev.ID, err)
		}
		var hooks []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("insert event %s: webhooks: %w", ev.ID, err)
			}
			hooks = append(hooks, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert event %s: webhooks: %w", ev.ID, err)
		}
		at := toMicros(now())
		for _, hook := range hooks {
			if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries
				(id, webhook_id, event_id, state, attempts, next_attempt_at, created_at, updated_at)
				VALUES (?, ?, ?, ?, 0, ?, ?, ?)`,
				"dlv_"+randomHex(10), hook, ev.ID, string(store.DeliveryPending), at, at, at); err != nil {
				return fmt.Errorf("insert event %s: delivery to %s: %w", ev.ID, hook, err)
			}
		}
		n = len(hooks)
		return nil
	})
	return n, err
}

func scanEvent(row scanner) (*store.Event, error) {
	ev := &store.Event{}
	var ts int64
	var metadata sql.NullString
	var data string
	if err := row.Scan(&ev.ID, &ev.Type, &ts, &ev.TeamID, &ev.SandboxID, &ev.TemplateID,
		&metadata, &ev.RequestID, &ev.APIKeyID, &data); err != nil {
		return nil, err
	}
	ev.Timestamp = fromMicros(ts)
	ev.Data = json.RawMessage(data)
	if metadata.Valid {
		if err := json.Unmarshal([]byte(metadata.String), &ev.Metadata); err != nil {
			return nil, fmt.Errorf("event %s metadata: %w", ev.ID, err)
		}
	}
	return ev, nil
}

// ListEvents returns one page of team f.TeamID's events matching f, in (timestamp, id)
// order, ascending or descending. Pages follow a position, not an offset.
func (db *DB) ListEvents(ctx context.Context, f store.EventFilter) (*store.EventPage, error) {
	if f.TeamID == "" {
		return nil, errors.New("list events: team is required")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	limit = min(limit, maxEventLimit)
	where := []string{"team_id = ?"}
	args := []any{f.TeamID}
	if f.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, f.SandboxID)
	}
	if len(f.Types) > 0 {
		where = append(where, "type IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(f.Types)), ", ")+")")
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	if !f.Since.IsZero() {
		where, args = append(where, "ts >= ?"), append(args, toMicros(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, "ts < ?"), append(args, toMicros(f.Until))
	}
	order, cmp := "ASC", ">"
	if f.Desc {
		order, cmp = "DESC", "<"
	}
	if f.After != nil {
		where = append(where, "(ts, id) "+cmp+" (?, ?)")
		args = append(args, toMicros(f.After.Timestamp), f.After.ID)
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+eventColumns+` FROM events WHERE `+
		strings.Join(where, " AND ")+` ORDER BY ts `+order+`, id `+order+` LIMIT ?`,
		append(args, limit+1)...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	page := &store.EventPage{Events: []*store.Event{}}
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		page.Events = append(page.Events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if len(page.Events) > limit {
		page.Events, page.More = page.Events[:limit], true
	}
	return page, nil
}

const webhookColumns = `id, team_id, name, url, events, secret, created_at`

func (db *DB) scanWebhook(row scanner) (*store.Webhook, error) {
	w := &store.Webhook{}
	var events string
	var created int64
	if err := row.Scan(&w.ID, &w.TeamID, &w.Name, &w.URL, &events, &w.Secret, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return nil, fmt.Errorf("webhook %s events: %w", w.ID, err)
	}
	w.CreatedAt = fromMicros(created)
	secret, err := db.openText(webhookName(w.ID), w.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", w.ID, err)
	}
	w.Secret = secret
	return w, nil
}

// InsertWebhook stores a new webhook. store.ErrConflict when one with w.ID exists,
// store.ErrNotFound when its team does not.
func (db *DB) InsertWebhook(ctx context.Context, w *store.Webhook) error {
	events, err := json.Marshal(w.Events)
	if err != nil || w.Events == nil {
		return fmt.Errorf("insert webhook %s: events are required", w.ID)
	}
	secret, err := db.sealText(webhookName(w.ID), w.Secret)
	if err != nil {
		return fmt.Errorf("insert webhook %s: %w", w.ID, err)
	}
	_, err = db.write.ExecContext(ctx, `INSERT INTO webhooks (`+webhookColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.TeamID, w.Name, w.URL, string(events), secret, toMicros(w.CreatedAt))
	switch {
	case isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY):
		return fmt.Errorf("insert webhook %s: %w", w.ID, store.ErrConflict)
	case isCode(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY):
		return fmt.Errorf("insert webhook %s: team %s: %w", w.ID, w.TeamID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("insert webhook %s: %w", w.ID, err)
	}
	return nil
}

// GetWebhook returns team teamID's webhook id, or store.ErrNotFound.
func (db *DB) GetWebhook(ctx context.Context, teamID, id string) (*store.Webhook, error) {
	w, err := db.scanWebhook(db.read.QueryRowContext(ctx,
		`SELECT `+webhookColumns+` FROM webhooks WHERE id = ? AND team_id = ?`, id, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("webhook %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// ListWebhooks returns team teamID's webhooks, oldest first.
func (db *DB) ListWebhooks(ctx context.Context, teamID string) ([]*store.Webhook, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+webhookColumns+` FROM webhooks
		WHERE team_id = ? ORDER BY created_at, id`, teamID)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	defer rows.Close()
	ws := []*store.Webhook{}
	for rows.Next() {
		w, err := db.scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("list webhooks: %w", err)
		}
		ws = append(ws, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return ws, nil
}

// DeleteWebhook deletes team teamID's webhook id with its deliveries and their attempts.
func (db *DB) DeleteWebhook(ctx context.Context, teamID, id string) error {
	res, err := db.write.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ? AND team_id = ?`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("delete webhook %s: %w", id, store.ErrNotFound)
	}
	return nil
}

const deliveryColumns = `d.id, d.webhook_id, d.event_id, e.type, d.state, d.attempts,
	d.next_attempt_at, d.created_at, d.updated_at`

func scanDelivery(row scanner, extra ...any) (*store.Delivery, error) {
	d := &store.Delivery{}
	var state string
	var next, created, updated int64
	if err := row.Scan(append([]any{&d.ID, &d.WebhookID, &d.EventID, &d.EventType, &state, &d.Attempts,
		&next, &created, &updated}, extra...)...); err != nil {
		return nil, err
	}
	d.State = store.DeliveryState(state)
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(next), fromMicros(created), fromMicros(updated)
	return d, nil
}

// ListDeliveries returns webhook webhookID's newest deliveries, at most limit (1..1000,
// 100 when 0), with every attempt of each.
func (db *DB) ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = defaultEventLimit
	}
	limit = min(limit, maxEventLimit)
	tx, err := db.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer tx.Rollback()
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM webhooks WHERE id = ? AND team_id = ?`,
		webhookID, teamID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("list deliveries: webhook %s: %w", webhookID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+`
		FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
		WHERE d.webhook_id = ? ORDER BY d.created_at DESC, d.id DESC LIMIT ?`, webhookID, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	ds := []*store.Delivery{}
	byID := map[string]*store.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		d.History = []*store.DeliveryAttempt{}
		ds = append(ds, d)
		byID[d.ID] = d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	if len(ds) == 0 {
		return ds, nil
	}
	ids := make([]any, 0, len(ds))
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	rows, err = tx.QueryContext(ctx, `SELECT delivery_id, attempt, started_at, status_code,
		latency_us, error_class, error, next_retry_at FROM webhook_attempts
		WHERE delivery_id IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")+`)
		ORDER BY delivery_id, attempt`, ids...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		a := &store.DeliveryAttempt{}
		var started, latency int64
		var next sql.NullInt64
		if err := rows.Scan(&a.DeliveryID, &a.Attempt, &started, &a.StatusCode, &latency,
			&a.ErrorClass, &a.Error, &next); err != nil {
			return nil, fmt.Errorf("list deliveries: attempts: %w", err)
		}
		a.StartedAt, a.Latency, a.NextRetryAt = fromMicros(started), time.Duration(latency)*time.Microsecond, fromNullMicros(next)
		if d := byID[a.DeliveryID]; d != nil {
			d.History = append(d.History, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: attempts: %w", err)
	}
	return ds, nil
}

// ClaimDeliveries leases up to limit due pending deliveries until leaseUntil and returns
// them with their webhook and event, in one write transaction, so two dispatchers never
// claim the same delivery.
func (db *DB) ClaimDeliveries(ctx context.Context, at, leaseUntil time.Time, limit int) ([]*store.DueDelivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	var due []*store.DueDelivery
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+`,
			w.id, w.team_id, w.name, w.url, w.events, w.secret, w.created_at,
			e.id, e.type, e.ts, e.team_id, e.sandbox_id, e.template_id, e.metadata, e.request_id, e.api_key_id, e.data
			FROM webhook_deliveries d
			JOIN webhooks w ON w.id = d.webhook_id
			JOIN events e ON e.id = d.event_id
			WHERE d.state = 'pending' AND d.next_attempt_at <= ?
			  AND (d.leased_until IS NULL OR d.leased_until <= ?)
			ORDER BY d.next_attempt_at, d.id LIMIT ?`, toMicros(at), toMicros(at), limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			w := struct {
				id, team, name, url, events, secret string
				created                             int64
			}{}
			e := struct {
				id, typ, team, sandbox, template, requestID, apiKeyID, data string
				ts                                                          int64
				metadata                                                    sql.NullString
			}{}
			d, err := scanDelivery(rows,
				&w.id, &w.team, &w.name, &w.url, &w.events, &w.secret, &w.created,
				&e.id, &e.typ, &e.ts, &e.team, &e.sandbox, &e.template, &e.metadata, &e.requestID, &e.apiKeyID, &e.data)
			if err != nil {
				rows.Close()
				return err
			}
			secret, err := db.openText(webhookName(w.id), w.secret)
			if err != nil {
				rows.Close()
				return fmt.Errorf("webhook %s: %w", w.id, err)
			}
			hook := &store.Webhook{ID: w.id, TeamID: w.team, Name: w.name, URL: w.url, Secret: secret,
				CreatedAt: fromMicros(w.created)}
			ev := &store.Event{ID: e.id, Type: e.typ, Timestamp: fromMicros(e.ts), TeamID: e.team,
				SandboxID: e.sandbox, TemplateID: e.template, RequestID: e.requestID, APIKeyID: e.apiKeyID,
				Data: json.RawMessage(e.data)}
			if err := json.Unmarshal([]byte(w.events), &hook.Events); err != nil {
				rows.Close()
				return fmt.Errorf("webhook %s events: %w", w.id, err)
			}
			if e.metadata.Valid {
				if err := json.Unmarshal([]byte(e.metadata.String), &ev.Metadata); err != nil {
					rows.Close()
					return fmt.Errorf("event %s metadata: %w", e.id, err)
				}
			}
			due = append(due, &store.DueDelivery{Delivery: d, Webhook: hook, Event: ev})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, dd := range due {
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET leased_until = ? WHERE id = ?`,
				toMicros(leaseUntil), dd.Delivery.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return due, nil
}

// NextDeliveryAt returns when the earliest pending delivery becomes claimable: its due
// time, or the end of its lease if later.
func (db *DB) NextDeliveryAt(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := db.read.QueryRowContext(ctx, `SELECT min(max(next_attempt_at, coalesce(leased_until, 0)))
		FROM webhook_deliveries WHERE state = 'pending'`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery: %w", err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	return fromMicros(at.Int64), true, nil
}

// RecordAttempt records a and moves its delivery to state, ending its lease.
func (db *DB) RecordAttempt(ctx context.Context, a *store.DeliveryAttempt, state store.DeliveryState) error {
	switch state {
	case store.DeliveryPending:
		if a.NextRetryAt == nil {
			return fmt.Errorf("record attempt %d of %s: pending without a next retry", a.Attempt, a.DeliveryID)
		}
	case store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return fmt.Errorf("record attempt %d of %s: unknown state %q", a.Attempt, a.DeliveryID, state)
	}
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		next := toMicros(now())
		if a.NextRetryAt != nil {
			next = toMicros(*a.NextRetryAt)
		}
		res, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries
			SET state = ?, attempts = ?, next_attempt_at = ?, leased_until = NULL, updated_at = ?
			WHERE id = ?`, string(state), a.Attempt, next, toMicros(now()), a.DeliveryID)
		if err != nil {
			return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.DeliveryID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.DeliveryID, err)
		} else if n == 0 {
			return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.DeliveryID, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, started_at,
			status_code, latency_us, error_class, error, next_retry_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			a.DeliveryID, a.Attempt, toMicros(a.StartedAt), a.StatusCode, a.Latency.Microseconds(),
			a.ErrorClass, a.Error, toNullMicros(a.NextRetryAt)); err != nil {
			if isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
				return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.DeliveryID, store.ErrConflict)
			}
			return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.DeliveryID, err)
		}
		return nil
	})
}

// ReleaseLeases ends the leases of deliveries ids, or of all deliveries when ids is empty.
func (db *DB) ReleaseLeases(ctx context.Context, ids ...string) error {
	q, args := `UPDATE webhook_deliveries SET leased_until = NULL WHERE leased_until IS NOT NULL`, []any{}
	if len(ids) > 0 {
		q += ` AND id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`
		for _, id := range ids {
			args = append(args, id)
		}
	}
	if _, err := db.write.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("release delivery leases: %w", err)
	}
	return nil
}
