package events

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// Error classes of a failed attempt, as recorded and reported.
const (
	ErrorDNS        = "dns"
	ErrorConnect    = "connect"
	ErrorTimeout    = "timeout"
	ErrorTLS        = "tls"
	ErrorHTTPStatus = "http_status"
	ErrorForbidden  = "forbidden_address" // the host resolves only to refused addresses
	ErrorOther      = "other"
)

// leaseMargin is how long past its timeout an attempt's claim lasts, so that a lost process's
// claims lapse soon after its attempts would have ended.
const leaseMargin = 5 * time.Second

// dispatch works the outbox until ctx ends: it claims due deliveries while workers are free,
// then sleeps until Emit or a finished attempt wakes it, or the next retry falls due.
func (b *Bus) dispatch(ctx context.Context) {
	defer close(b.done)
	log := telemetry.Logger(ctx)
	free := make(chan struct{}, b.cfg.Workers) // a token per idle worker
	for range b.cfg.Workers {
		free <- struct{}{}
	}
	busy := func() int { return b.cfg.Workers - len(free) }
	defer func() {
		// Wait for every worker to hand its token back.
		for range b.cfg.Workers {
			<-free
		}
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	const storeRetry = time.Second // after a store error, instead of spinning
	for {
		wait := time.Duration(-1) // no timer: only a wake-up
		slots := b.cfg.Workers - busy()
		if slots > 0 {
			now := time.Now()
			due, err := b.cfg.Store.ClaimDeliveries(ctx, now, now.Add(b.cfg.AttemptTimeout+leaseMargin), slots)
			if err != nil && ctx.Err() == nil {
				log.Error("webhook deliveries not claimed", telemetry.KeyError, err)
				wait = storeRetry
			}
			for _, d := range due {
				<-free
				go func() {
					defer func() { free <- struct{}{}; b.poke() }()
					b.attempt(ctx, d)
				}()
			}
			if err == nil && len(due) < slots {
				// Every due delivery is claimed; sleep until the next falls due.
				at, ok, err := b.cfg.Store.NextDeliveryAt(ctx)
				switch {
				case err != nil && ctx.Err() == nil:
					log.Error("next webhook delivery not found", telemetry.KeyError, err)
					wait = storeRetry
				case ok:
					wait = max(time.Until(at), time.Millisecond)
				}
			} else if err == nil {
				wait = 0 // more may be due: claim again at once
			}
		}
		if wait >= 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-b.wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// attempt makes one HTTP attempt of d and records it.
func (b *Bus) attempt(ctx context.Context, d *store.DueDelivery) {
	n := d.Delivery.Attempts + 1
	ctx = telemetry.With(ctx, telemetry.KeyWebhookID, d.Webhook.ID, telemetry.KeyWebhookDeliveryID, d.Delivery.ID,
		telemetry.KeyEventID, d.Event.ID, telemetry.KeyEventType, d.Event.Type, telemetry.KeyRequestID, d.Event.RequestID,
		telemetry.KeySandboxID, d.Event.SandboxID, telemetry.KeyTeamID, d.Event.TeamID, telemetry.KeyAttempt, n)
	log := telemetry.Logger(ctx)
	rec := &store.DeliveryAttempt{DeliveryID: d.Delivery.ID, Attempt: n, StartedAt: time.Now()}

	status, err := b.post(ctx, d)
	rec.Latency = time.Since(rec.StartedAt)
	if err != nil && ctx.Err() != nil {
		// Interrupted by Close: not an attempt. The next Bus tries it again.
		release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := b.cfg.Store.ReleaseLeases(release, d.Delivery.ID); err != nil {
			log.Warn("webhook delivery lease not released", telemetry.KeyError, err)
		}
		return
	}
	rec.StatusCode = status
	state := store.DeliveryDelivered
	retry := false
	if err != nil {
		rec.ErrorClass, rec.Error = classify(err), err.Error()
		retry = rec.ErrorClass != ErrorForbidden // an operator's decision, not a passing fault
	} else if status < 200 || status > 299 {
		rec.ErrorClass, rec.Error = ErrorHTTPStatus, "HTTP "+strconv.Itoa(status)
		retry = status >= 500 || status == http.StatusTooManyRequests
	}
	if rec.ErrorClass != "" {
		state = store.DeliveryFailed
		if retry && n < b.cfg.Backoff.Attempts {
			state = store.DeliveryPending
			next := time.Now().Add(b.cfg.Backoff.Delay(n))
			rec.NextRetryAt = &next
		}
	}
	// The record must land even if Close comes now: the attempt was made.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	switch err := b.cfg.Store.RecordAttempt(recCtx, rec, state); {
	case errors.Is(err, store.ErrNotFound):
		log.Info("webhook deleted during delivery")
		return
	case err != nil:
		log.Error("webhook attempt not recorded", telemetry.KeyError, err)
		return
	}
	switch state {
	case store.DeliveryDelivered:
		telemetry.WebhookAttempts.WithLabelValues(telemetry.WebhookDelivered).Inc()
	case store.DeliveryPending:
		telemetry.WebhookAttempts.WithLabelValues(telemetry.WebhookRetry).Inc()
	default:
		telemetry.WebhookAttempts.WithLabelValues(telemetry.WebhookFailed).Inc()
	}
	attrs := []any{telemetry.KeyHTTPStatus, status, telemetry.KeyDurationMS, rec.Latency.Milliseconds(),
		telemetry.KeyWebhookDeliveryState, string(state)}
	switch {
	case state == store.DeliveryDelivered:
		log.Debug("webhook delivered", attrs...)
	case state == store.DeliveryPending:
		log.Info("webhook attempt failed", append(attrs, telemetry.KeyErrorType, rec.ErrorClass,
			telemetry.KeyError, rec.Error, telemetry.KeyNextRetryAt, rec.NextRetryAt.UTC())...)
	default:
		log.Warn("webhook delivery failed", append(attrs, telemetry.KeyErrorType, rec.ErrorClass, telemetry.KeyError, rec.Error)...)
	}
}

// post sends d's event, signed, and returns the response status.
func (b *Bus) post(ctx context.Context, d *store.DueDelivery) (int, error) {
	body, err := Body(d.Event, Stamp{DeliveryID: d.Delivery.ID, Attempt: d.Delivery.Attempts + 1, SentAt: time.Now()})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cove-webhooks")
	req.Header.Set(HeaderWebhookID, d.Webhook.ID)
	req.Header.Set(HeaderDeliveryID, d.Delivery.ID)
	req.Header.Set(HeaderSignatureVersion, SignatureVersion)
	req.Header.Set(HeaderSignature, Sign(d.Webhook.Secret, body))
	resp, err := b.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, err
	}
	// Drain a little so the connection can be reused; a receiver's body is not kept.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// classify names the kind of a failed attempt's error.
func classify(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var recErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var alert tls.AlertError
	var netErr net.Error
	switch {
	case errors.Is(err, ErrForbiddenAddress):
		return ErrorForbidden
	case errors.As(err, &dnsErr):
		return ErrorDNS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return ErrorTimeout
	case errors.As(err, &recErr), errors.As(err, &certErr), errors.As(err, &unknownAuth),
		errors.As(err, &hostErr), errors.As(err, &invalidCert), errors.As(err, &alert):
		return ErrorTLS
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return ErrorConnect
	default:
		return ErrorOther
	}
}
