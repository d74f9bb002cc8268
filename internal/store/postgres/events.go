package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

const (
	maxEventLimit     = 1000
	defaultEventLimit = 100
)

const eventColumns = `id, type, ts, team_id, sandbox_id, template_id, metadata, request_id, api_key_id, data`

// InsertEvent stores ev in its day's partition and queues one pending delivery for each of
// its team's webhooks subscribed to ev.Type, in one transaction.
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
	metadata, err := jsonOrNil(ev.Metadata, ev.Metadata == nil)
	if err != nil {
		return 0, fmt.Errorf("insert event %s: metadata: %w", ev.ID, err)
	}
	if err := db.parts.ensure(ctx, db, "events", ev.Timestamp); err != nil {
		return 0, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	var n int
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// Ids are unique across days too: the key holds ts only because partitioning asks.
		var dup bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE id = $1)`, ev.ID).Scan(&dup); err != nil {
			return err
		}
		if dup {
			return store.ErrConflict
		}
		if _, err := tx.Exec(ctx, `INSERT INTO events (`+eventColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			ev.ID, ev.Type, ev.Timestamp, ev.TeamID, ev.SandboxID, ev.TemplateID, metadata, ev.RequestID, ev.APIKeyID, []byte(data)); err != nil {
			if isCode(err, uniqueViolation) {
				return store.ErrConflict
			}
			return err
		}
		at := now()
		tag, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries
			(id, webhook_id, event_id, event_ts, event_type, state, attempts, next_attempt_at, created_at, updated_at)
			SELECT 'dlv_' || substr(md5(random()::text || clock_timestamp()::text || id), 1, 20), id, $1, $2, $3, 'pending', 0, $4, $4, $4
			FROM webhooks WHERE team_id = $5 AND events ? $3 ORDER BY created_at, id`,
			ev.ID, ev.Timestamp, ev.Type, at, ev.TeamID)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("insert event %s: %w", ev.ID, err)
	}
	return n, nil
}

func scanEvent(row pgx.Row) (*store.Event, error) {
	ev := &store.Event{}
	var metadata, data []byte
	if err := row.Scan(&ev.ID, &ev.Type, &ev.Timestamp, &ev.TeamID, &ev.SandboxID, &ev.TemplateID,
		&metadata, &ev.RequestID, &ev.APIKeyID, &data); err != nil {
		return nil, err
	}
	ev.Timestamp, ev.Data = utc(ev.Timestamp), json.RawMessage(data)
	if metadata != nil {
		if err := json.Unmarshal(metadata, &ev.Metadata); err != nil {
			return nil, fmt.Errorf("event %s metadata: %w", ev.ID, err)
		}
	}
	return ev, nil
}

// ListEvents returns one page of team f.TeamID's events matching f, in (timestamp, id)
// order, ascending or descending, following a position.
func (db *DB) ListEvents(ctx context.Context, f store.EventFilter) (*store.EventPage, error) {
	if f.TeamID == "" {
		return nil, errors.New("list events: team is required")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	limit = min(limit, maxEventLimit)
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	where := []string{"team_id = " + arg(f.TeamID)}
	if f.SandboxID != "" {
		where = append(where, "sandbox_id = "+arg(f.SandboxID))
	}
	if len(f.Types) > 0 {
		where = append(where, "type = ANY("+arg(f.Types)+")")
	}
	if !f.Since.IsZero() {
		where = append(where, "ts >= "+arg(f.Since))
	}
	if !f.Until.IsZero() {
		where = append(where, "ts < "+arg(f.Until))
	}
	order, cmp := "ASC", ">"
	if f.Desc {
		order, cmp = "DESC", "<"
	}
	if f.After != nil {
		where = append(where, "(ts, id) "+cmp+" ("+arg(f.After.Timestamp)+", "+arg(f.After.ID)+")")
	}
	rows, err := db.pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE `+strings.Join(where, " AND ")+
		` ORDER BY ts `+order+`, id `+order+` LIMIT `+arg(limit+1), args...)
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

func (db *DB) scanWebhook(row pgx.Row) (*store.Webhook, error) {
	w := &store.Webhook{}
	var events []byte
	if err := row.Scan(&w.ID, &w.TeamID, &w.Name, &w.URL, &events, &w.Secret, &w.CreatedAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(events, &w.Events); err != nil {
		return nil, fmt.Errorf("webhook %s events: %w", w.ID, err)
	}
	w.CreatedAt = utc(w.CreatedAt)
	secret, err := db.openText(store.WebhookSealName(w.ID), w.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", w.ID, err)
	}
	w.Secret = secret
	return w, nil
}

// InsertWebhook stores a new webhook, its secret sealed.
func (db *DB) InsertWebhook(ctx context.Context, w *store.Webhook) error {
	events, err := json.Marshal(w.Events)
	if err != nil || w.Events == nil {
		return fmt.Errorf("insert webhook %s: events are required", w.ID)
	}
	secret, err := db.sealText(store.WebhookSealName(w.ID), w.Secret)
	if err != nil {
		return fmt.Errorf("insert webhook %s: %w", w.ID, err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO webhooks (`+webhookColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		w.ID, w.TeamID, w.Name, w.URL, events, secret, w.CreatedAt)
	switch {
	case isCode(err, uniqueViolation):
		return fmt.Errorf("insert webhook %s: %w", w.ID, store.ErrConflict)
	case isCode(err, foreignKeyViolation):
		return fmt.Errorf("insert webhook %s: team %s: %w", w.ID, w.TeamID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("insert webhook %s: %w", w.ID, err)
	}
	return nil
}

// GetWebhook returns team teamID's webhook id, or store.ErrNotFound.
func (db *DB) GetWebhook(ctx context.Context, teamID, id string) (*store.Webhook, error) {
	w, err := db.scanWebhook(db.pool.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1 AND team_id = $2`, id, teamID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("webhook %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// ListWebhooks returns team teamID's webhooks, oldest first.
func (db *DB) ListWebhooks(ctx context.Context, teamID string) ([]*store.Webhook, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE team_id = $1 ORDER BY created_at, id`, teamID)
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
	return ws, rows.Err()
}

// DeleteWebhook deletes team teamID's webhook id with its deliveries and their attempts.
func (db *DB) DeleteWebhook(ctx context.Context, teamID, id string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM webhooks WHERE id = $1 AND team_id = $2`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete webhook %s: %w", id, store.ErrNotFound)
	}
	return nil
}

const deliveryColumns = `d.id, d.webhook_id, d.event_id, d.event_type, d.state, d.attempts, d.next_attempt_at, d.created_at, d.updated_at`

func scanDelivery(row pgx.Row, extra ...any) (*store.Delivery, error) {
	d := &store.Delivery{}
	var state string
	if err := row.Scan(append([]any{&d.ID, &d.WebhookID, &d.EventID, &d.EventType, &state, &d.Attempts,
		&d.NextAttemptAt, &d.CreatedAt, &d.UpdatedAt}, extra...)...); err != nil {
		return nil, err
	}
	d.State = store.DeliveryState(state)
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = utc(d.NextAttemptAt), utc(d.CreatedAt), utc(d.UpdatedAt)
	return d, nil
}

// ListDeliveries returns webhook webhookID's newest deliveries, at most limit, with every
// attempt of each.
func (db *DB) ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = defaultEventLimit
	}
	limit = min(limit, maxEventLimit)
	ds := []*store.Delivery{}
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM webhooks WHERE id = $1 AND team_id = $2`, webhookID, teamID).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("webhook %s: %w", webhookID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries d
			WHERE d.webhook_id = $1 ORDER BY d.created_at DESC, d.id DESC LIMIT $2`, webhookID, limit)
		if err != nil {
			return err
		}
		byID := map[string]*store.Delivery{}
		var ids []string
		for rows.Next() {
			d, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return err
			}
			d.History = []*store.DeliveryAttempt{}
			ds, byID[d.ID], ids = append(ds, d), d, append(ids, d.ID)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT delivery_id, attempt, started_at, status_code, latency_us, error_class, error, next_retry_at
			FROM webhook_attempts WHERE delivery_id = ANY($1) ORDER BY delivery_id, attempt`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a := &store.DeliveryAttempt{}
			var latency int64
			if err := rows.Scan(&a.DeliveryID, &a.Attempt, &a.StartedAt, &a.StatusCode, &latency, &a.ErrorClass, &a.Error, &a.NextRetryAt); err != nil {
				return err
			}
			a.StartedAt, a.NextRetryAt, a.Latency = utc(a.StartedAt), utcPtr(a.NextRetryAt), time.Duration(latency)*time.Microsecond
			byID[a.DeliveryID].History = append(byID[a.DeliveryID].History, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return ds, nil
}

// ClaimDeliveries leases up to limit due pending deliveries until leaseUntil and returns them
// with their webhook and event. Rows another node is claiming are skipped (SKIP LOCKED), so two
// dispatchers never claim the same delivery.
func (db *DB) ClaimDeliveries(ctx context.Context, at, leaseUntil time.Time, limit int) ([]*store.DueDelivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	var due []*store.DueDelivery
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+`, d.event_ts FROM webhook_deliveries d
			WHERE d.state = 'pending' AND d.next_attempt_at <= $1 AND (d.leased_until IS NULL OR d.leased_until <= $1)
			ORDER BY d.next_attempt_at, d.id LIMIT $2 FOR UPDATE SKIP LOCKED`, at, limit)
		if err != nil {
			return err
		}
		type claimed struct {
			d  *store.Delivery
			ts time.Time
		}
		var cs []claimed
		for rows.Next() {
			var ts time.Time
			d, err := scanDelivery(rows, &ts)
			if err != nil {
				rows.Close()
				return err
			}
			cs = append(cs, claimed{d, ts})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range cs {
			hook, err := db.scanWebhook(tx.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1`, c.d.WebhookID))
			if err != nil {
				return fmt.Errorf("webhook %s: %w", c.d.WebhookID, err)
			}
			ev, err := scanEvent(tx.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1 AND ts = $2`, c.d.EventID, c.ts))
			if errors.Is(err, pgx.ErrNoRows) {
				continue // its day was dropped: nothing left to deliver
			}
			if err != nil {
				return fmt.Errorf("event %s: %w", c.d.EventID, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = $1 WHERE id = $2`, leaseUntil, c.d.ID); err != nil {
				return err
			}
			due = append(due, &store.DueDelivery{Delivery: c.d, Webhook: hook, Event: ev})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return due, nil
}

// NextDeliveryAt returns when the earliest pending delivery becomes claimable.
func (db *DB) NextDeliveryAt(ctx context.Context) (time.Time, bool, error) {
	var at *time.Time
	if err := db.pool.QueryRow(ctx, `SELECT min(greatest(next_attempt_at, coalesce(leased_until, next_attempt_at)))
		FROM webhook_deliveries WHERE state = 'pending'`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("next delivery: %w", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return at.UTC(), true, nil
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
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		next := now()
		if a.NextRetryAt != nil {
			next = *a.NextRetryAt
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET state = $1, attempts = $2, next_attempt_at = $3, leased_until = NULL, updated_at = $4
			WHERE id = $5`, string(state), a.Attempt, next, now(), a.DeliveryID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		_, err = tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, started_at, status_code, latency_us, error_class, error, next_retry_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, a.DeliveryID, a.Attempt, a.StartedAt, a.StatusCode, a.Latency.Microseconds(),
			a.ErrorClass, a.Error, a.NextRetryAt)
		if isCode(err, uniqueViolation) {
			return store.ErrConflict
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record attempt %d of %s: %w", a.Attempt, a.DeliveryID, err)
	}
	return nil
}

// ReleaseLeases ends the leases of deliveries ids, or of all deliveries when ids is empty.
func (db *DB) ReleaseLeases(ctx context.Context, ids ...string) error {
	var err error
	if len(ids) == 0 {
		_, err = db.pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = NULL WHERE leased_until IS NOT NULL`)
	} else {
		_, err = db.pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = NULL WHERE leased_until IS NOT NULL AND id = ANY($1)`, ids)
	}
	if err != nil {
		return fmt.Errorf("release delivery leases: %w", err)
	}
	return nil
}
