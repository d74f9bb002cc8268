package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// SecretInfo is a secret's metadata; no call ever returns a secret's value.
type SecretInfo struct {
	ID             string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

// SecretPlaceholder is what a network rule's header value writes to use the secret: Cove's
// egress proxy puts the value in on the host side, so it never enters the sandbox.
func SecretPlaceholder(name string) string { return "${e2b.secrets." + name + "}" }

// NewSecret is E2B's, the body of POST /secrets: CreateSecret sends it and the server decodes
// this very type.
type NewSecret struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata"` // null: none
}

// SecretUpdate is E2B's, the body of POST /secrets/{id}: a new version of the value.
type SecretUpdate struct {
	Value string `json:"value"`
	// Metadata replaces the secret's when not null (an empty object clears it).
	Metadata map[string]string `json:"metadata"`
}

// CreateSecret stores a new secret (names are lower-cased).
func (c *Client) CreateSecret(ctx context.Context, name, value string, metadata map[string]string) (*SecretInfo, error) {
	var out SecretInfo
	body := NewSecret{Name: name, Value: value, Metadata: metadata}
	if _, err := c.do(ctx, "create secret", "", http.MethodPost, "/secrets", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateSecret stores value as the secret's new version; metadata replaces the old when not nil.
func (c *Client) UpdateSecret(ctx context.Context, secret, value string, metadata map[string]string) (*SecretInfo, error) {
	var out SecretInfo
	body := SecretUpdate{Value: value, Metadata: metadata}
	if _, err := c.do(ctx, "update secret", "", http.MethodPost, "/secrets/"+url.PathEscape(secret), body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Secret returns a secret's metadata, by id or name.
func (c *Client) Secret(ctx context.Context, secret string) (*SecretInfo, error) {
	var out SecretInfo
	if _, err := c.do(ctx, "get secret", "", http.MethodGet, "/secrets/"+url.PathEscape(secret), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Secrets lists the team's secrets, every page.
func (c *Client) Secrets(ctx context.Context) ([]SecretInfo, error) {
	var all []SecretInfo
	next := ""
	for {
		var page []SecretInfo
		q := url.Values{"limit": {strconv.Itoa(100)}}
		if next != "" {
			q.Set("nextToken", next)
		}
		res, err := c.do(ctx, "list secrets", "", http.MethodGet, "/secrets?"+q.Encode(), nil, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next = res.header.Get("X-Next-Token"); next == "" {
			return all, nil
		}
	}
}

// DeleteSecret removes a secret and all its versions.
func (c *Client) DeleteSecret(ctx context.Context, secret string) error {
	_, err := c.do(ctx, "delete secret", "", http.MethodDelete, "/secrets/"+url.PathEscape(secret), nil, nil)
	return err
}
